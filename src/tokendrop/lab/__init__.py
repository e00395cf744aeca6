"""tokendrop.lab."""
