"""tokendrop.train."""
