"""tokendrop.models.modernbert."""
