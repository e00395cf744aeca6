"""tokendrop.dropping."""
