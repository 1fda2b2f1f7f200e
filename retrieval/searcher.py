"""Search an index by meaning, by words, or both: queries are embedded with the index's own
encoder and matched by cosine in FAISS (dense), by BM25 in the index's lexical file (lexical), or
the two fused (hybrid: the best candidates of each, rescored exactly on both sides and fused by
``retrieval.fusion``). Metadata filters are resolved in the database with bound parameters and
handed to FAISS as an id selector (and to BM25 as allowed ids), so the k results are the best k
among the questions that pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.encoder import Encoder
from core.errors import UserError
from core.lexical import LexicalIndex
from core.loader import load_encoder
from core.model_dir import (
    UNTUNED_DENSE_WEIGHT,
    EncoderIdentity,
    hybrid_dense_weight,
    require_same_encoder,
    weights_fingerprint,
)
from core.similarity import require_text
from indexer.directory import OpenIndex, open_index, recorded_model
from indexer.manifest import load_lexical
from indexer.store import StoredQuestion, source_named
from indexer.tuning import SEARCH_PARAMETERS
from indexer.vector_index import GPU_MAX_K, configure_search, gpu_copy, selector_parameters
from retrieval.fusion import SearchMode, default_mode, fuse

if TYPE_CHECKING:
    import faiss

EXCERPT_CHARS = 240
CANDIDATE_POOL = 100  # candidates from each side of a hybrid search before fusion


class SearchError(UserError):
    """A search that cannot run: empty index, unknown question, encoder that does not match."""


@dataclass(frozen=True)
class SearchFilters:
    """Restrict results by source file, category, or date; empty means no restriction.

    A source is a file name or a path: a path to an existing file is matched as that file
    (resolved, so a relative path finds what was indexed by its absolute path). Categories match
    whatever their case. Dates are ISO (YYYY-MM-DD, or with a time) and both ends are inclusive:
    ``date_to`` as a bare day includes that whole day. An invalid date is a SearchError."""

    sources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    date_from: str | None = None
    date_to: str | None = None

    def __post_init__(self) -> None:
        for bound, value in (("since", self.date_from), ("until", self.date_to)):
            if value is not None:
                try:
                    datetime.fromisoformat(value)
                except ValueError:
                    raise SearchError(f"{bound} {value!r} is not a date; use YYYY-MM-DD or an ISO "
                                      "date and time (2024-03-15 or 2024-03-15T09:30)") from None
        object.__setattr__(self, "sources", tuple(map(source_named, self.sources)))

    def __bool__(self) -> bool:
        return bool(self.sources or self.categories or self.date_from or self.date_to)


# each search setting: its option, and the manifest parameter it overrides
_SETTINGS = {"ef_search": ("--ef-search", "ef_search"), "nprobe": ("--nprobe", "probes"),
             "k_factor": ("--k-factor", "k_factor")}


@dataclass(frozen=True)
class SearchTuning:
    """Search-time settings of an approximate index; None keeps the one the build chose for the
    collection's size (recorded in the manifest, shown by ``index-info``). ``ef_search``: the
    candidates an HNSW search keeps; ``nprobe``: the IVF lists a search reads; ``k_factor``: the
    candidates per result that an ivfpq index re-scores on its fp16 vectors. Higher is more
    exact and slower."""

    ef_search: int | None = None
    nprobe: int | None = None
    k_factor: int | None = None

    def applied(self, index_type: str, recorded: dict[str, Any]) -> dict[str, Any]:
        """``recorded`` with these settings in place; a SearchError for a setting this index has
        no use for, or one out of range."""
        parameters = dict(recorded)
        usable = [key for key in SEARCH_PARAMETERS[index_type] if key in recorded]
        for name, (option, key) in _SETTINGS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if key not in usable:
                has = ", ".join(other for other, other_key in _SETTINGS.values() if other_key in usable)
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

    @property
    def match(self) -> float:
        """The cosine clipped at 0, read as a fraction: unrelated questions (cosine about 0)
        show as 0, not as the 2.5 of 5 that the angular scale gives them."""
        return max(0.0, self.cosine)

    @property
    def excerpt(self) -> str:
        text = " ".join(self.body.split())
        return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1].rstrip() + "…"

    def as_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "id": self.external_id, "source": self.source,
                "subject": self.subject, "excerpt": self.excerpt, "match": round(self.match, 4),
                "cosine": round(self.cosine, 6), "score": round(self.score, 6),
                "duplicate_of": self.duplicate_of,
                "metadata": {k: v for k, v in self.metadata.items() if k != "comments"}}


class Searcher:
    """An open index plus its encoder, loaded once per process; the BM25 file is read on the
    first lexical or hybrid search. ``default_mode`` follows the model's tuned hybrid weight
    (``askalike eval card --write``; see ``fusion.default_mode``) when the index has a BM25 file."""

    def __init__(self, index_dir: Path, database: str | None = None, model: str | None = None,
                 encoder: Encoder | None = None, tuning: SearchTuning | None = None) -> None:
        self.index: OpenIndex = open_index(index_dir, database)
        manifest = self.index.manifest
        identity = manifest.encoder

        try:
            spec = model or recorded_model(index_dir, identity)
            if tuning is not None and tuning != SearchTuning():  # else load_faiss applied them
                configure_search(self.index.faiss, tuning.applied(manifest.index_type, manifest.parameters))
            given = EncoderIdentity(spec, weights_fingerprint(spec), identity.dim)
            require_same_encoder(identity, given, str(index_dir),
                                 "restore the weights the index was built with, or build a new "
                                 "index with this model (`askalike index SOURCES --model MODEL "
                                 "--index NEWDIR`)", SearchError)
            self.encoder = encoder or load_encoder(spec)
            tuned = hybrid_dense_weight(spec)
        except BaseException:
            self.index.close()
            raise
        self.dense_weight = UNTUNED_DENSE_WEIGHT if tuned is None else tuned
        self.default_mode = default_mode(tuned) if self.index.manifest.lexical_file else SearchMode.dense

    @cached_property
    def gpu_faiss(self) -> faiss.Index | None:
        """The flat index copied to the GPUs on the first dense search (a lexical or filtered
        one never pays for CUDA's start); None without GPU FAISS and a GPU."""
        return gpu_copy(self.index.faiss)

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def count(self) -> int:
        return int(self.index.faiss.ntotal)

    @cached_property
    def lexical(self) -> LexicalIndex:
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
            return self._search_vectors(vectors, k, filters, exclude=None)
        allowed = self._allowed(filters, exclude=None)
        return [self._search_words(query, vector, k, filters, allowed, mode)
                for query, vector in zip(queries, vectors, strict=True)]

    def more_like(self, question_id: int, k: int = 10,
                  filters: SearchFilters | None = None) -> list[SearchResult]:
        """Questions most like a stored one (itself left out), by cosine to its stored vector
        (exact whatever the index type)."""
        self._require_questions()
        stored = self.index.store.vectors_of([int(question_id)], self.index.manifest.encoder.dim)
        if int(question_id) not in stored:
            raise SearchError(f"question {question_id} is not in the index")
        vector = stored[int(question_id)]
        return self._search_vectors(vector[None, :], k, filters, exclude=int(question_id))[0]

    def _require_questions(self) -> None:
        if self.count == 0:
            raise SearchError(f"the index at {self.index.directory} is empty: add questions with "
                              "`askalike index SOURCE`")

    def _allowed(self, filters: SearchFilters | None, exclude: int | None) -> np.ndarray | None:
        """The ids that pass the filters (None: every id)."""
        if not filters:
            return None
        allowed = self.index.store.ids_matching(filters.sources, filters.categories,
                                                filters.date_from, filters.date_to)
        return allowed if exclude is None else allowed[allowed != exclude]

    def _dense_hits(self, vectors: np.ndarray, k: int, allowed: np.ndarray | None,
                    exclude: int | None) -> tuple[list[list[tuple[int, float]]], dict[int, StoredQuestion]]:
        """Per query, up to k live (id, cosine) pairs, best first, and the stored rows they name."""
        if allowed is not None and not len(allowed):
            return [[] for _ in vectors], {}
        params = None if allowed is None else selector_parameters(self.index.faiss, allowed)
        # ids deleted but still indexed (a run was interrupted after its commit) are skipped:
        # ask FAISS for more until each query has k live hits or the index is exhausted
        wanted = min(k + 1 + (0 if exclude is None else 1), self.count)
        while True:
            cosines, ids = self._faiss_search(vectors, wanted, params)
            found = self.index.store.fetch(sorted({int(i) for i in ids.ravel() if i >= 0}))
            live = [[(int(i), float(c)) for i, c in zip(row_ids, row_cosines, strict=True)
                     if i >= 0 and int(i) != exclude and int(i) in found]
                    for row_cosines, row_ids in zip(cosines, ids, strict=True)]
            exhausted = (ids < 0).any(axis=1)  # FAISS had no more candidates for that query
            if wanted >= self.count or all(len(hits) >= k or done
                                           for hits, done in zip(live, exhausted, strict=True)):
                return [hits[:k] for hits in live], found
            wanted = min(2 * wanted, self.count)

    def _faiss_search(self, vectors: np.ndarray, wanted: int,
                      params: faiss.SearchParameters | None) -> tuple[np.ndarray, np.ndarray]:
        """On the GPU copy when there is one and the search suits it: no filter, and no more
        hits than FAISS's GPU search returns."""
        if params is not None:
            return self.index.faiss.search(vectors, wanted, params=params)
        on_gpu = self.gpu_faiss is not None and wanted <= GPU_MAX_K
        return (self.gpu_faiss if on_gpu else self.index.faiss).search(vectors, wanted)

    def _search_vectors(self, vectors: np.ndarray, k: int, filters: SearchFilters | None,
                        exclude: int | None) -> list[list[SearchResult]]:
        live, found = self._dense_hits(vectors, k, self._allowed(filters, exclude), exclude)
        return [_results([(i, c, c) for i, c in hits], found) for hits in live]

    def _search_words(self, query: str, vector: np.ndarray, k: int, filters: SearchFilters | None,
                      allowed: np.ndarray | None, mode: SearchMode) -> list[SearchResult]:
        """Lexical or hybrid: the best candidates of BM25 (and of FAISS, for hybrid), each scored
        exactly on both sides (cosine from its stored vector, BM25 from its postings)."""
        pool = max(k, CANDIDATE_POOL)
        candidates = {i for i, _ in self.lexical.top(query, pool, allowed)}
        if mode == SearchMode.hybrid:
            (dense,), _ = self._dense_hits(vector[None, :], pool, allowed, exclude=None)
            candidates |= {i for i, _ in dense}
        found = self.index.store.fetch(sorted(candidates))  # live questions only
        stored = self.index.store.vectors_of(list(found), self.index.manifest.encoder.dim)
        cosines = {i: float(stored[i] @ vector) for i in found}
        lexical = self.lexical.scores_of(query, list(found))
        scores = lexical if mode == SearchMode.lexical else fuse(cosines, lexical, self.dense_weight)
        best = sorted(found, key=lambda i: (-scores[i], i))[:k]
        return _results([(i, cosines[i], scores[i]) for i in best], found)


def _results(hits: list[tuple[int, float, float]], found: dict[int, StoredQuestion]) -> list[SearchResult]:
    """SearchResults of (id, cosine, score) hits, best first."""
    return [SearchResult(rank, i, found[i].external_id, found[i].source, found[i].subject, found[i].body,
                         found[i].metadata, cosine, score)
            for rank, (i, cosine, score) in enumerate(hits, start=1)]
