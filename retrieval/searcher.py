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
from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from indexer.directory import OpenIndex, open_index
from indexer.store import QuestionRow
from train.errors import UserError
from train.inference import Encoder, load_encoder
from train.model_io import weights_fingerprint
from train.similarity import angular_similarity

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

    def condition(self) -> ColumnElement[bool]:
        parts: list[ColumnElement[bool]] = []
        if self.sources:
            parts.append(or_(*(or_(QuestionRow.source == name,
                                   QuestionRow.source.endswith("/" + name, autoescape=True))
                               for name in self.sources)))
        if self.categories:
            parts.append(QuestionRow.meta["category"].as_string().in_(self.categories))
        if self.date_from:
            parts.append(QuestionRow.meta["date"].as_string() >= self.date_from)
        if self.date_to:
            parts.append(QuestionRow.meta["date"].as_string() <= self.date_to)
        return and_(*parts)


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
    similarity: float  # Yang et al.'s 0-5 scale: 5 * (1 - arccos(cos) / pi)
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
                "cosine": round(self.cosine, 6), "duplicate_of": self.duplicate_of,
                "metadata": {k: v for k, v in self.metadata.items() if k != "comments"}}


class Searcher:
    """An open index plus its encoder, loaded once per process."""

    def __init__(self, index_dir: Path, database: str | None = None, model: str | None = None,
                 encoder: Encoder | None = None) -> None:
        self.index: OpenIndex = open_index(index_dir, database)
        identity = self.index.manifest.encoder
        spec = model or identity.model
        try:
            if weights_fingerprint(spec) != identity.fingerprint:
                raise SearchError(f"{index_dir} was built with {identity.describe()}; {spec} is a "
                                  f"different encoder: search with --model {identity.model} or "
                                  "rebuild the index with the new model")
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
        return self._search_vectors(self.encoder.encode(list(queries)), k, filters, exclude=None)

    def more_like(self, question_id: int, k: int = 10,
                  filters: SearchFilters | None = None) -> list[SearchResult]:
        """Questions most like a stored one (itself left out)."""
        try:
            vector = self.index.faiss.reconstruct(int(question_id))
        except RuntimeError:
            raise SearchError(f"question {question_id} is not in the index") from None
        return self._search_vectors(vector[None, :], k, filters, exclude=int(question_id))[0]

    def _allowed_ids(self, filters: SearchFilters) -> np.ndarray:
        with Session(self.index.store.engine) as session:
            ids = session.scalars(select(QuestionRow.id).where(filters.condition()))
            return np.fromiter(ids, dtype=np.int64)

    def _search_vectors(self, vectors: np.ndarray, k: int, filters: SearchFilters | None,
                        exclude: int | None) -> list[list[SearchResult]]:
        if self.count == 0:
            raise SearchError(f"the index at {self.index.directory} is empty: add questions with "
                              "`askalike index SOURCE`")
        params = None
        if filters:
            allowed = self._allowed_ids(filters)
            if exclude is not None:
                allowed = allowed[allowed != exclude]
            if not len(allowed):
                return [[] for _ in vectors]
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
        # a deleted-but-still-indexed id (a run was interrupted) is dropped below: ask for spares
        wanted = min(k + 1 + (0 if exclude is None else 1), self.count)
        cosines, ids = (self.index.faiss.search(vectors, wanted, params=params) if params
                        else self.index.faiss.search(vectors, wanted))
        found = self.index.store.fetch(sorted({int(i) for i in ids.ravel() if i >= 0}))
        results = []
        for row_cosines, row_ids in zip(cosines, ids, strict=True):
            hits = [(int(i), float(c)) for i, c in zip(row_ids, row_cosines, strict=True)
                    if i >= 0 and int(i) != exclude and int(i) in found][:k]
            similarities = angular_similarity(np.array([c for _, c in hits], dtype=np.float64))
            results.append([
                SearchResult(rank, i, found[i].external_id, found[i].source, found[i].subject,
                             found[i].body, found[i].metadata, c, float(s))
                for rank, ((i, c), s) in enumerate(zip(hits, similarities, strict=True), start=1)])
        return results
