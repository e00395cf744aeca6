"""tokendrop.runs."""
