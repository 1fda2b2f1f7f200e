"""Search an index by meaning, by words, or both: queries are embedded with the index's own
encoder and matched by cosine in FAISS (dense), by BM25 in the index's lexical file (lexical), or
the two fused (hybrid: the best candidates of each, rescored exactly on both sides and fused by
``retrieval.fusion``). Metadata filters are resolved in the database with bound parameters and
handed to FAISS as an id selector (and to BM25 as allowed ids). A dense search scans the vectors
of the questions that pass exactly where they are few, or where an approximate search would
read about as many; otherwise it goes to the approximate index with its settings raised for k
and the filter (``IndexType.query_settings``), and one that comes back short is answered by
the scan. So the k results are the best k among the questions that pass, and k of them whenever
k pass, on every index type."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from askalike.core.dates import ORDER_OPTION, DateOrder, DateValueError, date_window
from askalike.core.encoder import Encoder
from askalike.core.errors import UserError
from askalike.core.lexical import LexicalSegments
from askalike.core.loader import load_encoder
from askalike.core.model_dir import (
    UNTUNED_DENSE_WEIGHT,
    EncoderIdentity,
    hybrid_dense_weight,
    require_same_encoder,
    weights_fingerprint,
)
from askalike.core.similarity import require_text
from askalike.core.sorted_ids import find_sorted
from askalike.indexer.directory import OpenIndex, model_for_index, open_index
from askalike.indexer.index_types import SEARCH_OPTIONS, named_index_type
from askalike.indexer.manifest import load_lexical
from askalike.indexer.source_identity import source_labels
from askalike.indexer.store import IndexReading, StoredQuestion, source_named
from askalike.indexer.vector_index import (
    ALREADY_SORTED,
    GPU_MAX_K,
    HeldVectors,
    SegmentedIndex,
    configure_search,
)
from askalike.retrieval.fusion import SearchMode, default_mode, fused_score
from askalike.retrieval.judgement import Judge, model_judge

Hit = tuple[int, float]  # a question's row id and its cosine to the query
EXCERPT_CHARS = 240
CANDIDATE_POOL = 100  # candidates from each side of a hybrid search before fusion


class _DeletedSinceOpen(Exception):
    """A hit was deleted after this state's stored ids were remembered (``Searcher._fetch``)."""


_Found = TypeVar("_Found")


class SearchError(UserError):
    """A search that cannot run: empty index, unknown question, encoder that does not match."""


class AmbiguousIdError(SearchError):
    """An id that several sources hold, given without the source that picks one."""


@dataclass(frozen=True)
class SearchFilters:
    """Restrict results by source file, category, or date; empty means no restriction.

    A source is a file name, a label (``a/c200.csv``) or a path, matched as typed (whole, or as
    the end of a source's path) and, where it is a path to an existing file, as that file
    (``source_named``: a relative path finds what was indexed by its absolute path). Categories match
    trimmed and whatever their case. Dates are read as the index run reads them (``core.dates``,
    ``date_order`` for 10/01/2024), compared in UTC, and both ends are inclusive: ``date_to`` as a
    day includes that whole day; a question without a date passes no date filter. An invalid
    date is a SearchError."""

    sources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    date_from: str | None = None
    date_to: str | None = None
    date_order: DateOrder | None = None
    where: tuple[tuple[str, str], ...] = ()  # (metadata field, value): ``where_filter``'s
    order_option: str = field(default=ORDER_OPTION, compare=False)  # what gives date_order (messages)
    # [start, end) in UTC of the dates that pass (None: open)
    window: tuple[datetime | None, datetime | None] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "window", date_window(self.date_from, self.date_to, self.date_order,
                                                           self.order_option))
        except DateValueError as err:
            raise SearchError(str(err)) from None
        object.__setattr__(self, "sources", tuple(dict.fromkeys(
            name for source in self.sources for name in source_named(source))))

    def __bool__(self) -> bool:
        return bool(self.sources or self.categories or self.date_from or self.date_to or self.where)


WHERE_OPTION = "--where"


def where_filter(text: str, option: str = WHERE_OPTION) -> tuple[str, str]:
    """``KEY=VALUE`` (``--where team=Billing``, the API's ``where``) as (key, value): the key
    as columns are named (trimmed, lower case), the value as given; a SearchError otherwise."""
    key, equals, value = text.partition("=")
    key = key.strip().lower()
    if not equals or not key or not value.strip():
        raise SearchError(f"{option} {text!r}: expected KEY=VALUE, a metadata column and its value "
                          "(e.g. team=Billing)")
    return key, value.strip()


def where_filters(texts: Iterable[str], option: str = WHERE_OPTION) -> tuple[tuple[str, str], ...]:
    return tuple(where_filter(text, option) for text in texts)


@dataclass(frozen=True)
class SearchSettings:
    """Search-time settings of an approximate index; None keeps the one the build chose for the
    collection's size (recorded in the manifest, shown by ``index-info``). ``ef_search``: the
    candidates an HNSW search keeps; ``probes``: the IVF lists a search reads (``--nprobe``);
    ``k_factor``: the candidates per result that an ivfpq index re-scores on its fp16 vectors.
    Higher is more exact and slower. They are the settings for the best 10 of all questions: a
    search for more, or with a filter, raises ef_search and probes in proportion
    (``query_settings``)."""

    ef_search: int | None = None
    probes: int | None = None
    k_factor: int | None = None

    def applied(self, index_type: str, recorded: dict[str, Any]) -> dict[str, Any]:
        """``recorded`` with these settings in place; a SearchError for a setting this index has
        no use for, or one out of range."""
        parameters = dict(recorded)
        usable = [key for key in named_index_type(index_type).search_settings if key in recorded]
        for key, option in SEARCH_OPTIONS.items():  # a field of SearchSettings each
            value = getattr(self, key)
            if value is None:
                continue
            if key not in usable:
                has = ", ".join(other for other_key, other in SEARCH_OPTIONS.items() if other_key in usable)
                raise SearchError(f"{option} does not apply to this {index_type} index "
                                  + (f"(its settings: {has})" if has else "(it has no search settings)"))
            if value < 1:
                raise SearchError(f"{option} {value}: must be at least 1")
            if key == "probes" and value > recorded["lists"]:
                raise SearchError(f"{option} {value}: the index has {recorded['lists']} lists")
            parameters[key] = value
        return parameters


@dataclass(frozen=True)
class SearchResult:
    rank: int
    row_id: int  # the database's row id (stable; what ``more_like`` takes)
    external_id: str  # the question's id in the user's own collection
    source: str
    subject: str
    body: str
    metadata: dict[str, Any] = field(repr=False)
    cosine: float
    score: float  # what the results are ordered by: the cosine, the BM25 score or the fused score
    duplicate_of: int | None = None  # rank of a better hit this one nearly duplicates
    # the figure a person reads, in every mode: how likely the hit asks the same question as the
    # query, from their cosine by the model's calibrated judge (``retrieval.judgement``); made
    # without one (None), the cosine clipped to [0, 1], as for a model never calibrated
    match: float = None  # type: ignore[assignment]
    alike: tuple[SearchResult, ...] = ()  # near-duplicates folded into this hit (``collapse``)
    # its date as the index run stored it (ISO 8601, UTC) and its category as its source wrote
    # it, from whichever columns the run read them (``--date-column``, ``--category-column``)
    date: str | None = None
    category: str | None = None

    def __post_init__(self) -> None:
        if self.match is None:
            object.__setattr__(self, "match", clipped(self.cosine))

    @property
    def excerpt(self) -> str:
        text = " ".join(self.body.split())
        return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1].rstrip() + "…"

    def as_json(self, source_label: Callable[[str], str] = str) -> dict[str, Any]:
        """The hit as JSON; sources named by ``source_label`` (the whole stored name unless told)."""
        return {"rank": self.rank, "id": self.external_id, "source": source_label(self.source),
                "subject": self.subject, "excerpt": self.excerpt, "match": round(self.match, 4),
                "cosine": round(self.cosine, 6), "score": round(self.score, 6),
                "duplicate_of": self.duplicate_of,
                "alike": [{"id": other.external_id, "source": source_label(other.source),
                           "match": round(other.match, 4)} for other in self.alike],
                "metadata": {k: v for k, v in self.metadata.items() if k != "comments"}}


def _listed(counts: dict[str, int], shown: int = 12) -> str:
    """Values and their counts, the commonest first: ``Billing (12), Sales (3)``."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    more = len(ranked) - shown
    listed = ", ".join(f"{name} ({count:,})" for name, count in ranked[:shown])
    return listed + (f" and {more} more" if more > 0 else "")


def clipped(fraction: float) -> float:
    return min(1.0, max(0.0, fraction))


def find_question(index: OpenIndex, external_id: str, sources: Sequence[str] = (),
                  source_option: str = "--source") -> StoredQuestion:
    """The stored question with the user's id ``external_id`` (from one of ``sources`` only, file
    names or paths, when given); a SearchError when there is none, an AmbiguousIdError when
    there is one in each of several sources (naming ``source_option``, what picks one). Reads the
    store only: no model is loaded."""
    wanted = [name for source in sources for name in source_named(source)]
    found = [question for name in index.store.source_names()
             if not wanted or any(name == one or name.endswith("/" + one) for one in wanted)
             for question in index.store.questions_with_ids(name, [external_id]).values()]
    if not found:
        raise SearchError(f"no question with id {external_id!r} in {index.directory}"
                          + (f" from {', '.join(sources)}" if sources else ""))
    if len(found) > 1:
        labels = source_labels(index.store.source_names())
        named = ", ".join(labels[q.source] for q in found)
        raise AmbiguousIdError(f"id {external_id!r} is in {len(found)} sources ({named}): "
                               f"name one with {source_option}")
    return found[0]


class Searcher:
    """An open index plus its encoder, loaded once per process; the BM25 file is read on the
    first lexical or hybrid search. ``default_mode`` follows the model's tuned hybrid weight
    (``askalike eval card --write``; see ``fusion.default_mode``) when the index has a BM25 file.
    ``threads`` caps the encoder's threads (None: ONNX Runtime's choice); ``prepared`` reads the
    BM25 file and computes what a first search would (its BM25 weights, the sources' labels) at
    opening instead (a long-running process: no search pays for them, not even the first on a
    state a write has just opened: at 100,000 questions they took 0.1 s, for which every client
    then waited).

    Searches skip the indexed questions that are no longer stored (a run interrupted between its
    database commit and its index files, or a delete since this state was opened). With
    ``remember_stored`` (a long-running process: ``askalike serve``) the ids stored at opening are
    read once and checked in memory; a row found deleted when the hits are fetched turns that
    off and the search runs again, checking the store, as every search does without it."""

    def __init__(self, index_dir: Path, database: str | None = None, model: str | None = None,
                 encoder: Encoder | None = None, settings: SearchSettings | None = None,
                 threads: int | None = None, remember_stored: bool = False,
                 prepared: bool = False) -> None:
        self.index: OpenIndex = open_index(index_dir, database, lexical=prepared)
        manifest = self.index.manifest
        identity = manifest.encoder

        try:
            spec = model_for_index(index_dir, model, identity)
            # the settings each search starts from (query_settings raises them for k and filters)
            self.parameters = (manifest.parameters if settings is None
                               else settings.applied(manifest.index_type, manifest.parameters))
            if settings is not None and settings != SearchSettings():  # else load_faiss applied them
                configure_search(self.index.faiss.main, self.parameters)
            given = EncoderIdentity(spec, weights_fingerprint(spec), identity.dim)
            require_same_encoder(identity, given, str(index_dir),
                                 "restore the weights (and export) the index was built with, or build a new "
                                 "index with this model (`askalike index SOURCES --model MODEL "
                                 "--index NEWDIR`)", SearchError)
            self.encoder = encoder or load_encoder(spec, threads)
            tuned = hybrid_dense_weight(spec)
            self.judge: Judge = model_judge(spec)
            self.dense_weight = UNTUNED_DENSE_WEIGHT if tuned is None else tuned
            self.default_mode = (default_mode(tuned) if self.index.manifest.lexical_file
                                 else SearchMode.dense)
            self._stored_at_open = self._stored_ids() if remember_stored else None
            if prepared:
                self._prepare()
        except BaseException:
            self.index.close()
            raise

    def _prepare(self) -> None:
        """Compute now what the first search would compute and keep."""
        if self.index.lexical is not None:
            self.index.lexical.prepare()
        _ = self._held_vectors, self.reading, self.source_labels

    def _stored_ids(self) -> np.ndarray | None:
        """The ids stored now, sorted, while the store is at the generation the manifest records:
        then they are the FAISS file's (a sync writes exactly the stored questions), read from it
        in C; a delete after this read is caught by ``_fetch``. None once the store has moved on
        (a write committed since the manifest, or a run interrupted before its files): the
        searches of this state then check the store, as without ``remember_stored``. Reading
        100,000 ids from the store instead held the interpreter for 100 ms, and under back-to-back
        writes a new state often found the next write committed: every search of that process
        waited."""
        if self.index.store.generation() == self.index.manifest.generation:
            return np.sort(self.index.faiss.ids(), kind=ALREADY_SORTED)
        return None

    @cached_property
    def gpu_faiss(self) -> SegmentedIndex | None:
        """The flat index copied to the GPUs on the first dense search (a lexical or filtered
        one never pays for CUDA's start); None without GPU FAISS and a GPU."""
        return self.index.faiss.on_gpu()

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def count(self) -> int:
        return self.index.faiss.ntotal

    @cached_property
    def source_labels(self) -> dict[str, str]:
        """Each stored source as a person is shown it (``source_identity.source_labels``), read
        once for the state this searcher opened."""
        return source_labels(self.index.store.source_names())

    def source_label(self, source: str) -> str:
        return self.source_labels.get(source, source)

    @cached_property
    def lexical(self) -> LexicalSegments:
        if self.index.lexical is not None:
            return self.index.lexical
        return load_lexical(self.index.directory, self.index.manifest)

    def search(self, query: str, k: int = 10, filters: SearchFilters | None = None,
               mode: SearchMode | None = None) -> list[SearchResult]:
        return self.search_many([query], k, filters, mode)[0]

    def search_many(self, queries: Sequence[str], k: int = 10, filters: SearchFilters | None = None,
                    mode: SearchMode | None = None) -> list[list[SearchResult]]:
        """Dense: one FAISS batch search for all queries, embedded together. Lexical and hybrid:
        query by query (BM25 reads each query's postings)."""
        if not queries:
            return []
        require_text(queries, "query")
        self._require_questions()
        mode = mode or self.default_mode
        vectors = self.encoder.encode(list(queries))
        if mode == SearchMode.dense:
            return self._checked(lambda: self._search_vectors(vectors, k, filters, exclude=None))
        allowed = self._allowed(filters, exclude=None)
        return self._checked(lambda: [self._search_words(query, vector, k, allowed, mode)
                                      for query, vector in zip(queries, vectors, strict=True)])

    def more_like(self, question_id: int, k: int = 10,
                  filters: SearchFilters | None = None) -> list[SearchResult]:
        """Questions most like a stored one (itself left out), by cosine to its stored vector
        (exact whatever the index type)."""
        self._require_questions()
        stored = self._stored_vectors([int(question_id)])
        if int(question_id) not in stored:
            raise SearchError(f"question {question_id} is not in the index")
        vector = stored[int(question_id)]
        return self._checked(lambda: self._search_vectors(vector[None, :], k, filters,
                                                          exclude=int(question_id))[0])

    def question(self, external_id: str, sources: Sequence[str] = (),
                 source_option: str = "--source") -> StoredQuestion:
        """The stored question with the user's id (``find_question``)."""
        return find_question(self.index, external_id, sources, source_option)

    def _require_questions(self) -> None:
        if self.count == 0:
            raise SearchError(f"the index at {self.index.directory} is empty: add questions with "
                              "`askalike index SOURCE`")

    def _allowed(self, filters: SearchFilters | None, exclude: int | None) -> np.ndarray | None:
        """The ids that pass the filters (None: every id)."""
        if not filters:
            return None
        allowed = self.index.store.ids_matching(filters.sources, filters.categories, *filters.window,
                                                where=filters.where)
        return allowed if exclude is None else allowed[allowed != exclude]

    @cached_property
    def reading(self) -> IndexReading:
        """How the index's runs read its questions: the date format its date filters use where
        a search names none, and the columns of the date and the category."""
        return IndexReading.of(self.index.store)

    def filters(self, sources: Sequence[str] = (), categories: Sequence[str] = (),
                since: str | None = None, until: str | None = None, date_order: DateOrder | None = None,
                where: Sequence[str] = (), order_option: str = ORDER_OPTION,
                where_option: str = WHERE_OPTION) -> SearchFilters:
        """The filters of a search of this index: dates read by ``date_order``, else by the
        index's own (``reading``); ``where`` as KEY=VALUE texts."""
        return SearchFilters(tuple(sources), tuple(categories), since, until,
                             date_order or self.reading.date_order, where_filters(where, where_option),
                             order_option)

    def require_fields(self, named: Mapping[str, Sequence[str]],
                       also: Mapping[str, Sequence[str]] | None = None) -> None:
        """Refuse metadata fields that no stored question has, by the option that names them
        (``{"--where": keys, "--fields": names}``; ``also``: what else an option takes, for the
        message): a misspelt column could only ever show or match nothing. The index's fields
        are read once, and not at all when nothing is named. The API keeps answering such a
        search (questions written later may have the field); a command refuses it."""
        if not any(named.values()):
            return
        known = self.index.store.metadata_keys()
        for option, names in named.items():
            unknown = [name for name in dict.fromkeys(names) if name not in known]
            if unknown:
                others = (also or {}).get(option, ())
                raise SearchError(f"{option} {', '.join(unknown)}: no question has "
                                  f"{'that field' if len(unknown) == 1 else 'those fields'} "
                                  f"(its fields: {', '.join(sorted(known)) or 'none'}"
                                  + (f"; or one of {', '.join(others)})" if others else ")"))

    def why_nothing(self, filters: SearchFilters) -> str:
        """Why a filtered search found nothing, in words: of several filters, each one without
        which questions would match (the one that empties the result); then what the index holds
        of what the filters ask for (its sources, its categories, the values of a --where field,
        the span of its dates)."""
        store, reasons = self.index.store, []
        window, no_window = filters.window, (None, None)
        given = {"source": bool(filters.sources), "category": bool(filters.categories),
                 "date": window != no_window, "metadata": bool(filters.where)}
        if sum(given.values()) > 1:
            for kind in (kind for kind, on in given.items() if on):
                count = len(store.ids_matching(
                    () if kind == "source" else filters.sources,
                    () if kind == "category" else filters.categories,
                    *(no_window if kind == "date" else window),
                    where=() if kind == "metadata" else filters.where))
                if count:
                    reasons.append(f"without the {kind} filter, {count:,} would match")
        if filters.sources:
            counts = store.counts_by_source()
            reasons.append("its sources: " + _listed({self.source_label(source): count
                                                       for source, count in counts.items()}))
        if filters.categories:
            have = store.category_counts()
            reasons.append(f"its categories: {_listed(have)}" if have else
                           "it holds no categories (index with --category-column COLUMN)")
        for key in dict.fromkeys(key for key, _ in filters.where):
            values = store.metadata_values(key)
            reasons.append(f"{key}: {_listed(values)}" if values else
                           f"no question has a {key!r} field (its fields: "
                           f"{', '.join(sorted(store.metadata_keys())) or 'none'})")
        if window != no_window:
            dated, first, last = store.date_span()
            reasons.append(f"its dates run from {first:%Y-%m-%d} to {last:%Y-%m-%d} ({dated:,} dated)"
                           if first and last else
                           "it holds no dates (index with --date-column COLUMN, and --date-format "
                           "for dates such as 01/03/2025)")
        return "no questions match the filters" + (f"; {'; '.join(reasons)}" if reasons else "")


    def _dense_hits(self, vectors: np.ndarray, k: int, allowed: np.ndarray | None,
                    exclude: int | None, recall_for: int | None = None) -> list[list[Hit]]:
        """Per query, up to k live (id, cosine) pairs, best first:
        the best k of the questions that pass (``allowed``; None: all), with at least
        min(k, those that pass) of them. An approximate search that comes back with fewer (its
        candidates ran out before enough passed) is answered again by the exact scan.
        ``recall_for``: an approximate index is set for the recall of the best that many (None:
        k), as a hybrid search reads a deep candidate list whose head decides the order."""
        if allowed is not None and not len(allowed):
            return [[] for _ in vectors]
        hits = self._faiss_hits(vectors, k, allowed, exclude, approximate=True, recall_for=recall_for)
        passing = self.count - (exclude is not None) if allowed is None else len(allowed)
        short = [row for row, row_hits in enumerate(hits) if len(row_hits) < min(k, passing)]
        if short and self._settings(k if recall_for is None else min(k, recall_for), allowed) is not None:
            again = self._faiss_hits(vectors[short], k, allowed, exclude, approximate=False)
            for row, row_hits in zip(short, again, strict=True):
                hits[row] = row_hits
        return hits

    def _settings(self, wanted: int, allowed: np.ndarray | None) -> dict[str, int] | None:
        """The approximate search settings for ``wanted`` hits among ``allowed``; None: scan."""
        return named_index_type(self.index.manifest.index_type).query_settings(
            self.parameters, self.count, self.count if allowed is None else len(allowed), wanted)

    def _faiss_hits(self, vectors: np.ndarray, k: int, allowed: np.ndarray | None, exclude: int | None,
                    approximate: bool, recall_for: int | None = None) -> list[list[Hit]]:
        """Up to k live (id, cosine) pairs per query from FAISS (the search ``query_settings``
        chooses, for the recall of the best ``recall_for`` when given, or the exact scan). Ids
        deleted but still indexed
        (a run was interrupted after its commit) are skipped: FAISS is asked for more until each
        query has k live hits or no more come. Where FAISS's cosines are not exact (ivfpq's fp16
        copies), hits are re-scored from the stored vectors, and FAISS is asked for more until
        none left out could, within the error, outscore the k-th."""
        error = self.index.faiss.cosine_error
        wanted = min(k + 1 + (0 if exclude is None else 1), self.count)
        while True:
            settings = (self._settings(wanted if recall_for is None else min(wanted, recall_for), allowed)
                        if approximate else None)
            cosines, ids = self._faiss_search(vectors, wanted, allowed, settings)
            kept = (ids >= 0) & (ids != (-1 if exclude is None else exclude))
            kept[kept] = self._live_mask(ids[kept])
            live = [list(zip(row_ids[row_kept].tolist(), row_cosines[row_kept].tolist(), strict=True))
                    for row_cosines, row_ids, row_kept in zip(cosines, ids, kept, strict=True)]
            exhausted = (ids < 0).any(axis=1)  # FAISS had no more candidates for that query
            # with inexact cosines, a question left out may outscore the k-th by up to twice the error
            settled = [done or (len(hits) >= k and (not error or last < hits[k - 1][1] - 2 * error))
                       for hits, done, last in zip(live, exhausted, cosines[:, -1], strict=True)]
            if wanted >= self.count or all(settled):
                return [hits[:k] for hits in (self._rescored(vectors, live) if error else live)]
            wanted = min(2 * wanted, self.count)

    def _rescored(self, vectors: np.ndarray, hits: list[list[Hit]]) -> list[list[Hit]]:
        """Each query's ``hits`` re-scored by the cosine of their stored (exact) vectors, best first."""
        stored = self._stored_vectors({i for row in hits for i, _ in row})
        return [sorted(((i, float(stored[i] @ vector)) for i, _ in row if i in stored),
                       key=lambda hit: (-hit[1], hit[0]))
                for vector, row in zip(vectors, hits, strict=True)]

    def _faiss_search(self, vectors: np.ndarray, wanted: int, allowed: np.ndarray | None,
                      settings: dict[str, int] | None) -> tuple[np.ndarray, np.ndarray]:
        """The approximate search with ``settings``, or (None) the scan; an unfiltered scan of
        a flat index runs on its GPU copy where there is one and FAISS's GPU search returns that
        many hits."""
        if settings is not None:
            return self.index.faiss.approximate(vectors, wanted, allowed, settings)
        if allowed is None and self.gpu_faiss is not None and wanted <= GPU_MAX_K:
            return self.gpu_faiss.search(vectors, wanted)
        return self.index.faiss.scan(vectors, wanted, allowed)

    def _search_vectors(self, vectors: np.ndarray, k: int, filters: SearchFilters | None,
                        exclude: int | None) -> list[list[SearchResult]]:
        live = self._dense_hits(vectors, k, self._allowed(filters, exclude), exclude)
        found = self._fetch(sorted({i for hits in live for i, _ in hits}))
        return [_results([(i, c, c) for i, c in hits if i in found], found, self.judge, self.reading)
                for hits in live]

    def _search_words(self, query: str, vector: np.ndarray, k: int, allowed: np.ndarray | None,
                      mode: SearchMode) -> list[SearchResult]:
        """Lexical or hybrid: the best k among the questions that pass, by BM25 (those sharing a
        word with the query) or by the fused score. Candidates are scored exactly on both sides
        (cosine from the stored vector, BM25 from the postings).

        A question's fused score depends on the query, never on k: the bounds of the min-max
        normalisation are those of a pool of fixed size (the best ``CANDIDATE_POOL`` of each
        side), and a question outside it is scored with the same bounds. A pool that grew with
        k moved the bounds and reordered the top. The best k are then found by the threshold
        algorithm (Fagin et al. 2001): both sides' lists are read deeper until the k-th best
        score among the questions seen is at least what one missing from both could reach (the
        score of the lists' last cosine and last BM25 score), so ``-k 10`` returns the first
        10 of ``-k 1000``. Over an approximate index the dense list is itself approximate: a
        deeper one may find a question that a shallower one missed. It is searched with the
        settings for the k asked, not for its depth: the head of each list decides the top, and
        at 100,000 questions the settings for 100 candidates took half the search's time and
        changed 0.2% of its top 10 (``bench/serve.py``)."""
        hybrid, depth, score = mode == SearchMode.hybrid, CANDIDATE_POOL, None
        lexical_scores = self.lexical.scores(query)
        while True:
            word_ids, word_scores = self.lexical.top_arrays(lexical_scores, depth, allowed)
            meaning = (self._dense_hits(vector[None, :], depth, allowed, exclude=None, recall_for=k)[0]
                       if hybrid else [])
            meaning_ids = np.fromiter((i for i, _ in meaning), dtype=np.int64, count=len(meaning))
            ids, cosines = self._cosines(vector, np.union1d(word_ids, meaning_ids))
            bm25 = self.lexical.scores_of_ids(lexical_scores, ids)
            if score is None:  # the first round's candidates are the pool that fixes the bounds
                score = (fused_score(cosines.tolist(), bm25.tolist(), self.dense_weight)
                         if hybrid else lambda _, bm25_score: bm25_score)
            scores = np.broadcast_to(score(cosines, bm25), ids.shape)  # fused_score's maps take arrays
            ranked = np.lexsort((ids, -scores))  # best first, ties by id
            seen_all = len(meaning) < depth if hybrid else len(word_ids) < depth
            unseen = score(meaning[-1][1] if meaning else -1.0,
                           float(word_scores[-1]) if len(word_ids) == depth else 0.0)
            if seen_all or (len(ranked) >= k and scores[ranked[k - 1]] >= unseen):
                best = ranked[:k]
                found = self._fetch(ids[best].tolist())  # only the rows shown are read whole
                return _results([(i, c, f) for i, c, f in zip(ids[best].tolist(), cosines[best].tolist(),
                                                               scores[best].tolist(), strict=True)
                                 if i in found], found, self.judge, self.reading)
            depth = max(2 * depth, k)

    def _cosines(self, vector: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(those of ``ids`` still stored; the cosine of ``vector`` and each one's stored
        (exact) vector)."""
        live, stored = self._stored_vector_arrays(ids)
        # row by row, each summed alike whatever the other rows (a matrix product's rounding
        # depends on how many there are, and a question's score must not)
        return live, (stored * vector).sum(axis=1).astype(np.float64)

    @cached_property
    def _held_vectors(self) -> HeldVectors | None:
        return HeldVectors.of(self.index.faiss)

    def vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        """The exact vectors of the indexed questions ``ids`` (whether or not still stored): the
        FAISS index's own where it holds them in float32, else the store's."""
        found, vectors = self._vector_arrays(np.unique(np.fromiter(ids, dtype=np.int64)))
        return dict(zip(found.tolist(), vectors, strict=True))

    def _vector_arrays(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``vectors`` of sorted unique ``ids`` as (those found, sorted; their vectors as rows)."""
        dim = self.index.manifest.encoder.dim
        held = _rows({}, dim) if self._held_vectors is None else self._held_vectors.arrays(ids)
        if len(held[0]) == len(ids):
            return held
        rest = _rows(self.index.store.vectors_of(np.setdiff1d(ids, held[0]).tolist(), dim), dim)
        found = np.concatenate([held[0], rest[0]])
        order = np.argsort(found)
        return found[order], np.concatenate([held[1], rest[1]])[order]

    def _stored_vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        """The exact vectors of the questions still stored among ``ids``."""
        found, vectors = self._stored_vector_arrays(np.unique(np.fromiter(ids, dtype=np.int64)))
        return dict(zip(found.tolist(), vectors, strict=True))

    def _stored_vector_arrays(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_stored_vectors`` of sorted unique ``ids`` as (those still stored, sorted; their
        vectors as rows)."""
        if self._held_vectors is None:  # the store's rows say both
            dim = self.index.manifest.encoder.dim
            return _rows(self.index.store.vectors_of(ids.tolist(), dim), dim)
        return self._vector_arrays(ids[self._live_mask(ids)])

    def _live_mask(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` (int64) are still stored (by the ids remembered at opening, if any)."""
        remembered = self._stored_at_open  # once: another search may turn it off meanwhile
        if remembered is not None:
            return find_sorted(remembered, ids)[1]
        stored = self.index.store.live_ids(np.unique(ids).tolist())
        return np.fromiter((i in stored for i in ids.tolist()), dtype=bool, count=len(ids))

    def _fetch(self, ids: Sequence[int]) -> dict[int, StoredQuestion]:
        """The stored rows of the hits ``ids``. One missing while the ids stored at opening are
        what ``_live_mask`` checks means a delete since: ``_DeletedSinceOpen``, and from then on
        the store is asked."""
        found = self.index.store.fetch(ids)
        if len(found) < len(ids) and self._stored_at_open is not None:
            self._stored_at_open = None
            raise _DeletedSinceOpen
        return found

    def _checked(self, search: Callable[[], _Found]) -> _Found:
        """``search``'s result, run again if it met a question deleted since this state opened."""
        try:
            return search()
        except _DeletedSinceOpen:
            return search()


def _rows(vectors: dict[int, np.ndarray], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(the ids of ``vectors``, sorted; their vectors as rows)."""
    ids = np.fromiter(vectors, dtype=np.int64, count=len(vectors))
    order = np.argsort(ids)
    rows = np.stack(list(vectors.values())) if vectors else np.zeros((0, dim), dtype=np.float32)
    return ids[order], rows[order]


def _results(hits: list[tuple[int, float, float]], found: dict[int, StoredQuestion],
             judge: Judge, reading: IndexReading) -> list[SearchResult]:
    """SearchResults of (id, cosine, score) hits, best first, each hit's match ``judge``'s."""
    results = []
    for rank, (i, cosine, score) in enumerate(hits, start=1):
        question = found[i]
        category = question.metadata.get(reading.category_column)
        results.append(SearchResult(rank, i, question.external_id, question.source, question.subject,
                                    question.body, question.metadata, cosine, score,
                                    match=float(judge.probability(cosine)), date=question.date,
                                    category=None if category is None else str(category)))
    return results
