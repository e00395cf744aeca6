"""tokendrop.models."""
