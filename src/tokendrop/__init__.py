"""tokendrop: token dropping for faster BERT pretraining (Hou et al., ACL 2022)."""

__version__ = "0.1.0"
