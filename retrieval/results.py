"""What a person is shown of a search's hits, shared by the CLI, the TUI and the HTTP server:
weak hits dropped (``at_least``), near-duplicates folded into their better hit (``collapsed``),
the one entry point of a search as shown (``Shown.search``, ``Shown.like``) and the JSON payload
of one search (``search_payload``, its schema in docs/cli.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from askalike.indexer.store import StoredQuestion
from askalike.retrieval.duplicates import mark_near_duplicates
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.judgement import SEARCH_MIN_MATCH
from askalike.retrieval.searcher import Searcher, SearchFilters, SearchResult

COLLAPSE_DEPTH = 3  # a collapsed search reads this many hits per hit shown, to fill k after folding


def at_least(results: list[SearchResult], min_match: float) -> list[SearchResult]:
    """The hits whose match reaches ``min_match`` (a fraction), in their order."""
    return [result for result in results if result.match >= min_match]


def collapsed(results: list[SearchResult]) -> list[SearchResult]:
    """``results`` (marked by ``mark_near_duplicates``) with each near-duplicate folded into the
    better hit it duplicates (or into the hit that one is folded into), as its ``alike``; the
    hits kept are ranked again from 1."""
    leader_of: dict[int, int] = {}  # rank -> rank of the hit it is folded into
    folded: dict[int, list[SearchResult]] = {}
    for result in results:
        if result.duplicate_of is None:
            leader_of[result.rank] = result.rank
            folded[result.rank] = []
        else:
            leader = leader_of.get(result.duplicate_of, result.duplicate_of)
            leader_of[result.rank] = leader
            folded[leader].append(replace(result, duplicate_of=None))
    kept = [result for result in results if result.duplicate_of is None]
    return [replace(result, rank=rank, alike=(*result.alike, *folded[result.rank]))
            for rank, result in enumerate(kept, start=1)]


@dataclass(frozen=True)
class ShownSearch:
    """One search as a person is shown it: what it asked (``query``, or ``like`` a question), the
    mode that ran, the hits shown and how many the searcher found before they were picked."""

    hits: list[SearchResult]
    found: int  # hits the searcher found, before min-match and folding
    mode: SearchMode
    query: str | None = None
    like: SearchResult | StoredQuestion | None = None

    def payload(self, source_label: Callable[[str], str] = str) -> dict[str, Any]:
        """The search's JSON object (``search_payload``)."""
        return search_payload(self.hits, self.mode, self.query, self.like, source_label)


@dataclass(frozen=True)
class Shown:
    """How a search's hits are shown: at most ``k``, none below ``min_match``, near-duplicates
    marked "≈ #N" or (``collapse``) folded into their better hit."""

    k: int = 10
    min_match: float = SEARCH_MIN_MATCH
    collapse: bool = False

    @property
    def depth(self) -> int:
        """How many hits to ask the searcher for."""
        return self.k * COLLAPSE_DEPTH if self.collapse else self.k

    def of(self, searcher: Searcher, results: list[SearchResult]) -> list[SearchResult]:
        """``results`` (``depth`` of them, best first) as shown."""
        marked = mark_near_duplicates(searcher, results)
        return at_least(collapsed(marked) if self.collapse else marked, self.min_match)[: self.k]

    def search(self, searcher: Searcher, queries: Sequence[str], filters: SearchFilters | None = None,
               mode: SearchMode | None = None) -> list[ShownSearch]:
        """Each query searched (in ``mode``, else the searcher's default) and shown."""
        ran = mode or searcher.default_mode
        found = searcher.search_many(queries, self.depth, filters, ran)
        return [ShownSearch(self.of(searcher, results), len(results), ran, query=query)
                for query, results in zip(queries, found, strict=True)]

    def like(self, searcher: Searcher, question: SearchResult | StoredQuestion,
             filters: SearchFilters | None = None) -> ShownSearch:
        """More like a stored question (a hit, or a question found by its id), shown."""
        row_id = question.row_id if isinstance(question, SearchResult) else question.id
        found = searcher.more_like(row_id, self.depth, filters)
        return ShownSearch(self.of(searcher, found), len(found), SearchMode.dense, like=question)


def search_payload(results: list[SearchResult], mode: SearchMode, query: str | None = None,
                   like: SearchResult | StoredQuestion | None = None,
                   source_label: Callable[[str], str] = str) -> dict[str, Any]:
    """One search as JSON: the query (or, for "more like this", the question it started from),
    the mode that ran, and the hits; sources named by ``source_label`` (``search --json``: the
    whole stored name; the HTTP API: ``Searcher.source_label``)."""
    asked = ({"query": query} if like is None
             else {"like": {"id": like.external_id, "source": source_label(like.source)}})
    return {**asked, "mode": mode.value, "count": len(results),
            "results": [result.as_json(source_label) for result in results]}
