"""Where the tests find the offline stand-in data.  Generated data (corpora, vocabularies, toy
tasks, checkpoints) comes from ``tokendrop.data.testing``."""

from pathlib import Path

# The offline stand-in data beside the checkout (../shared/data; its README describes it).  Tests that
# read it skip when it is absent: the suite never depends on it.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
