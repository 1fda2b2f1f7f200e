"""The names and defaults a user picks from when indexing. Light on purpose: the CLI shows them
in its options without loading FAISS, SQLAlchemy or numpy."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

DEFAULT_INDEX_DIR = Path("askalike-index")  # in the working directory, unless $ASKALIKE_INDEX says
INDEX_ENV_VAR = "ASKALIKE_INDEX"
DATABASE_ENV_VAR = "ASKALIKE_DB"
AUTO_INDEX_TYPE = "auto"  # pick an index type by the collection's size (indexer.index_type_choice)


class Engine(StrEnum):
    """Where an index run embeds: in its own process, or on a Ray cluster (``indexer.ray_engine``)."""

    in_process = "in-process"
    ray = "ray"


class OnError(StrEnum):
    """What a run does with a bad source row."""

    stop = "stop"
    skip = "skip"
