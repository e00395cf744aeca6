"""tokendrop.models.bert."""
