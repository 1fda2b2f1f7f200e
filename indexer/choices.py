"""The names and defaults a user picks from when indexing. Light on purpose: the CLI shows them
in its options without loading FAISS, SQLAlchemy or numpy."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

DEFAULT_INDEX_DIR = Path("askalike-index")
DATABASE_ENV_VAR = "ASKALIKE_DB"
INDEX_TYPES = ("flat", "hnsw", "ivf", "ivfpq")
AUTO_INDEX_TYPE = "auto"  # pick flat, hnsw or ivfpq by the collection's size (indexer.tuning)


class OnError(StrEnum):
    """What a run does with a bad source row."""

    stop = "stop"
    skip = "skip"
