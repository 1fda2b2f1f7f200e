"""Which FAISS index type suits a collection of a given size (``auto``), and the type a run
builds. Each type's parameters are its class's in ``indexer.index_types``. Light (no FAISS, no
numpy): the CLI and the dry run use it.

- ``flat`` (exact) up to ``AUTO_FLAT_MAX`` vectors;
- ``hnsw`` up to ``AUTO_HNSW_MAX``;
- ``ivfpq`` beyond, whose memory and build time stay linear.
"""

from __future__ import annotations

from askalike.indexer.choices import AUTO_INDEX_TYPE
from askalike.indexer.index_types import INDEX_TYPES, SEARCH_OPTIONS, Flat, Hnsw, IndexBuildError, IvfPq

AUTO_FLAT_MAX = 100_000
AUTO_HNSW_MAX = 2_000_000


def require_index_type(name: str | None) -> None:
    """Refuse an unknown --index-type before any work is done."""
    if name is not None and name != AUTO_INDEX_TYPE and name not in INDEX_TYPES:
        raise IndexBuildError(f"unknown index type {name!r} (known: {AUTO_INDEX_TYPE}, "
                              f"{', '.join(INDEX_TYPES)})")


def auto_index_type(count: int) -> tuple[str, str]:
    """The index type for ``count`` vectors, and why (for the user)."""
    if count <= AUTO_FLAT_MAX:
        return Flat.name, f"auto: exact search for {count:,} questions (flat up to {AUTO_FLAT_MAX:,})"
    if count <= AUTO_HNSW_MAX:
        return Hnsw.name, (f"auto: {count:,} questions, over flat's {AUTO_FLAT_MAX:,} and up to "
                        f"hnsw's {AUTO_HNSW_MAX:,}")
    return IvfPq.name, f"auto: {count:,} questions, over hnsw's {AUTO_HNSW_MAX:,}"


def resolve_index_type(requested: str | None, current: str | None, count: int) -> tuple[str, str]:
    """The type to build and why: the one asked for; else an existing index keeps its own;
    ``auto`` (asked for, or for a new index) picks by ``count``."""
    require_index_type(requested)
    if requested is None and current is not None:
        return current, "the index's own type"
    if requested is None or requested == AUTO_INDEX_TYPE:
        return auto_index_type(count)
    return requested, "given by --index-type"


def index_types_table() -> str:
    """The index types as docs/search.md lists them (a Markdown table), read from the registry
    and ``auto``'s thresholds, so that the page says what the code does (tests/test_scale.py
    compares them)."""
    auto_picks = {Flat.name: f"up to {AUTO_FLAT_MAX:,} questions",
                  Hnsw.name: f"{AUTO_FLAT_MAX + 1:,} to {AUTO_HNSW_MAX:,} questions",
                  IvfPq.name: f"over {AUTO_HNSW_MAX:,} questions"}
    rows = ["| `--index-type` | what it is | `auto` picks it for | search options |", "|---|---|---|---|"]
    rows += [f"| `{kind.name}` | {kind.summary} | {auto_picks.get(kind.name, 'never')} | "
             f"{', '.join(f'`{SEARCH_OPTIONS[setting]}`' for setting in kind.search_settings) or '-'} |"
             for kind in INDEX_TYPES.values()]
    return "\n".join(rows)
