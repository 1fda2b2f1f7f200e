"""Search an index by meaning: queries are embedded with the index's own encoder and matched by
cosine in FAISS; metadata filters are resolved in the database with bound parameters and handed
to FAISS as an id selector, so the k results are the best k among the questions that pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.directory import OpenIndex, open_index
from indexer.store import EncoderIdentity, require_same_encoder
from train.errors import UserError
from train.inference import Encoder, load_encoder
from train.model_io import weights_fingerprint
from train.similarity import angular_similarity, require_text

EXCERPT_CHARS = 240


class SearchError(UserError):
    """A search that cannot run: empty index, unknown question, encoder that does not match."""


@dataclass(frozen=True)
class SearchFilters:
    """Restrict results by source file (full path or file name), category, or date (ISO
    strings compared as text, inclusive); empty means no restriction."""

    sources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    date_from: str | None = None
    date_to: str | None = None

    def __bool__(self) -> bool:
        return bool(self.sources or self.categories or self.date_from or self.date_to)


@dataclass(frozen=True)
class SearchResult:
    rank: int
    id: int  # the question's row id (stable; what ``more_like`` takes)
    external_id: str
    source: str
    subject: str
    body: str
    metadata: dict[str, Any] = field(repr=False)
    cosine: float
    similarity: float  # Yang et al.'s 0-5 scale: 5 * (1 - arccos(cos) / pi)

    @property
    def excerpt(self) -> str:
        text = " ".join(self.body.split())
        return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1].rstrip() + "…"

    def as_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "id": self.id, "external_id": self.external_id,
                "source": self.source, "subject": self.subject, "excerpt": self.excerpt,
                "cosine": round(self.cosine, 6), "similarity": round(self.similarity, 4),
                "metadata": {k: v for k, v in self.metadata.items() if k != "comments"}}


class Searcher:
    """An open index plus its encoder, loaded once per process."""

    def __init__(self, index_dir: Path, database: str | None = None, model: str | None = None,
                 encoder: Encoder | None = None) -> None:
        self.index: OpenIndex = open_index(index_dir, database)
        identity = self.index.manifest.encoder
        spec = model or identity.model
        try:
            given = EncoderIdentity(spec, weights_fingerprint(spec), identity.dim)
            require_same_encoder(identity, given, str(index_dir),
                                 f"search with --model {identity.model} or rebuild the index "
                                 "with the new model", SearchError)
            self.encoder = encoder or load_encoder(spec)
        except BaseException:
            self.index.close()
            raise

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def count(self) -> int:
        return int(self.index.faiss.ntotal)

    def search(self, query: str, k: int = 10, filters: SearchFilters | None = None) -> list[SearchResult]:
        return self.search_many([query], k, filters)[0]

    def search_many(self, queries: Sequence[str], k: int = 10,
                    filters: SearchFilters | None = None) -> list[list[SearchResult]]:
        """One FAISS batch search for all queries, embedded together."""
        if not queries:
            return []
        require_text(queries, "query")
        return self._search_vectors(self.encoder.encode(list(queries)), k, filters, exclude=None)

    def more_like(self, question_id: int, k: int = 10,
                  filters: SearchFilters | None = None) -> list[SearchResult]:
        """Questions most like a stored one (itself left out)."""
        try:
            vector = self.index.faiss.reconstruct(int(question_id))
        except RuntimeError:
            raise SearchError(f"question {question_id} is not in the index") from None
        return self._search_vectors(vector[None, :], k, filters, exclude=int(question_id))[0]

    def _search_vectors(self, vectors: np.ndarray, k: int, filters: SearchFilters | None,
                        exclude: int | None) -> list[list[SearchResult]]:
        if self.count == 0:
            raise SearchError(f"the index at {self.index.directory} is empty: add questions with "
                              "`askalike index SOURCE`")
        params = None
        if filters:
            allowed = self.index.store.ids_matching(filters.sources, filters.categories,
                                                    filters.date_from, filters.date_to)
            if exclude is not None:
                allowed = allowed[allowed != exclude]
            if not len(allowed):
                return [[] for _ in vectors]
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
        # ids deleted but still indexed (a run was interrupted after its commit) are skipped:
        # ask FAISS for more until each query has k live hits or the index is exhausted
        wanted = min(k + 1 + (0 if exclude is None else 1), self.count)
        while True:
            cosines, ids = (self.index.faiss.search(vectors, wanted, params=params) if params
                            else self.index.faiss.search(vectors, wanted))
            found = self.index.store.fetch(sorted({int(i) for i in ids.ravel() if i >= 0}))
            live = [[(int(i), float(c)) for i, c in zip(row_ids, row_cosines, strict=True)
                     if i >= 0 and int(i) != exclude and int(i) in found]
                    for row_cosines, row_ids in zip(cosines, ids, strict=True)]
            exhausted = (ids < 0).any(axis=1)  # FAISS had no more candidates for that query
            if wanted >= self.count or all(len(hits) >= k or done
                                           for hits, done in zip(live, exhausted, strict=True)):
                break
            wanted = min(2 * wanted, self.count)
        results = []
        for row_hits in live:
            hits = row_hits[:k]
            similarities = angular_similarity(np.array([c for _, c in hits], dtype=np.float64))
            results.append([
                SearchResult(rank, i, found[i].external_id, found[i].source, found[i].subject,
                             found[i].body, found[i].metadata, c, float(s))
                for rank, ((i, c), s) in enumerate(zip(hits, similarities, strict=True), start=1)])
        return results
