"""Okapi BM25 over a question collection, Lucene's variant (k1 = 1.5, b = 0.75, idf =
log(1 + (N - df + 0.5) / (df + 0.5)), no (k1 + 1) factor), numpy only.

The index keeps term postings (term, question id, term frequency) sorted by term, so a query
reads only its terms' postings, and an index run adds and removes questions without re-reading
the others: IDF, the average length and each posting's length norm are computed at query time
from what is indexed. So an index may be kept in segments (``LexicalSegments``: an index
directory's main BM25 file and the file of the questions added since), scored exactly as one
index of all their questions: a write then rewrites only the small segment, and a process that
opens the new state reuses the main one it has (as Lucene's segments).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from askalike.core.sorted_ids import find_sorted

K1, B = 1.5, 0.75
# _positions looks ids up in a table while they span at most this many ids a question (8 bytes
# each: at most 64 bytes a question, 6.4 MB at 100,000)
POSITION_TABLE_SPREAD = 8
_WORD = re.compile(r"\w+")
# Lucene's English stop set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET)
STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they",
    "this", "to", "was", "will", "with"))


def lexical_tokens(text: str) -> list[str]:
    """Lowercased word tokens without English stopwords."""
    return [token for token in _WORD.findall(text.lower()) if token not in STOPWORDS]


class _Bm25Scoring:
    """BM25 queries over ``segments``: ``doc_ids`` is theirs end to end (each segment's ids above
    the one before's), and a question's score is what one index of all of them gives."""

    doc_ids: np.ndarray

    @property
    def segments(self) -> tuple[LexicalIndex, ...]:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.doc_ids)

    def prepare(self) -> None:
        """Compute what every search needs and keeps (each segment's ``_scoring`` and
        ``term_ids``) now, not on the first."""
        for segment in self.segments:
            _ = segment._scoring, segment.term_ids

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every indexed question for ``query``, aligned with ``doc_ids``
        (each query token counts once per occurrence, as in Lucene)."""
        total = np.zeros(len(self.doc_ids), dtype=np.float64)
        if not len(self.doc_ids):
            return total
        segments, per_length = self.segments, self._per_length
        for token in lexical_tokens(query):
            slices = [segment.postings_of(token) for segment in segments]
            frequency = sum(end - start for start, end in slices)
            if not frequency:
                continue
            idf = np.log(1.0 + (len(self.doc_ids) - frequency + 0.5) / (frequency + 0.5))
            for segment, (start, end), first in zip(segments, slices, self._firsts, strict=True):
                if start == end:
                    continue
                positions, counts, counts_and_floor, lengths = segment._scoring
                # tf / (tf + k1 (1 - b + b length / average)), in place
                weights = lengths[start:end] * per_length
                weights += counts_and_floor[start:end]
                np.divide(counts[start:end], weights, out=weights)
                weights *= idf
                total[first:][positions[start:end]] += weights
        return total

    @cached_property
    def _per_length(self) -> float:
        """k1 b / the average question length: what a question's length adds to its norm."""
        lengths = sum(segment._total_length for segment in self.segments)
        return K1 * B / max(lengths / max(len(self.doc_ids), 1), 1e-9)

    @cached_property
    def _firsts(self) -> list[int]:
        """Where each segment's questions start in ``doc_ids``."""
        return np.cumsum([0] + [len(segment) for segment in self.segments[:-1]]).tolist()

    def scores_of(self, query: str, ids: Sequence[int]) -> dict[int, float]:
        """The BM25 score of each of ``ids`` for ``query``; 0 for an id the index lacks."""
        return self.scores_at(self.scores(query), ids)

    def scores_at(self, scores: np.ndarray, ids: Sequence[int]) -> dict[int, float]:
        """Each of ``ids``'s score in ``scores`` (what ``scores`` returned); 0 for an id the
        index lacks."""
        return dict(zip(np.asarray(ids, dtype=np.int64).tolist(), self.scores_of_ids(scores, ids).tolist(),
                        strict=True))

    def scores_of_ids(self, scores: np.ndarray, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """``scores_at`` as an array aligned with ``ids``."""
        _, indexed, positions = find_sorted(self.doc_ids, ids)
        return np.where(indexed, scores[positions] if len(scores) else 0.0, 0.0)

    def top(self, query: str, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """The ``k`` best (question id, score) pairs with a positive score, best first; only ids
        in ``allowed`` when given."""
        return self.top_of(self.scores(query), k, allowed)

    def top_of(self, scores: np.ndarray, k: int,
               allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """``top`` of the ``scores`` of one query (what ``scores`` returned); ties by id."""
        ids, best = self.top_arrays(scores, k, allowed)
        return list(zip(ids.tolist(), best.tolist(), strict=True))

    def top_arrays(self, scores: np.ndarray, k: int,
                   allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``top_of`` as (question ids, scores) arrays."""
        hits = np.flatnonzero(scores > 0)
        if allowed is not None:
            hits = hits[np.isin(self.doc_ids[hits], allowed)]
        if len(hits) > k:  # only the best k are sorted: a common word puts thousands above 0
            kth = -np.partition(-scores[hits], k - 1)[k - 1]
            hits = hits[scores[hits] >= kth]
        best = hits[np.argsort(-scores[hits], kind="stable")[:k]]
        return self.doc_ids[best], scores[best]


@dataclass(frozen=True)
class LexicalIndex(_Bm25Scoring):
    """One segment of postings; queried alone, or with others as ``LexicalSegments``."""

    terms: tuple[str, ...]  # term id -> term
    doc_ids: np.ndarray  # int64, sorted: the indexed questions' ids
    doc_lengths: np.ndarray  # int32, tokens per question, aligned with doc_ids
    offsets: np.ndarray  # int64, len(terms) + 1: term t's postings are [offsets[t], offsets[t + 1])
    posting_docs: np.ndarray  # int64 question ids
    posting_counts: np.ndarray  # int32 term frequencies

    @classmethod
    def build(cls, documents: Iterable[tuple[int, str]]) -> LexicalIndex:
        """An index of (question id, text) pairs."""
        return cls.empty().updated(documents, ())

    @classmethod
    def empty(cls) -> LexicalIndex:
        none = np.zeros(0, dtype=np.int64)
        return cls((), none, none.astype(np.int32), np.zeros(1, dtype=np.int64), none,
                   none.astype(np.int32))

    @cached_property
    def term_ids(self) -> dict[str, int]:
        """Term -> term id, built once per index: every query reads it (at 100,000 questions,
        building it took longer than the query)."""
        return {term: index for index, term in enumerate(self.terms)}

    def updated(self, added: Iterable[tuple[int, str]], removed: Iterable[int]) -> LexicalIndex:
        """A new index without the ``removed`` ids and with the ``added`` (id, text) pairs (an id
        both removed and added is replaced). ``added`` is read once, each id at most once."""
        terms, term_ids = list(self.terms), dict(self.term_ids)  # _postings adds to both
        new_terms, new_docs, new_counts, added_ids, added_lengths = _postings(added, terms, term_ids)
        if len(np.unique(added_ids)) < len(added_ids):
            raise ValueError("an id is added twice")
        removed_ids = np.fromiter(removed, dtype=np.int64)
        if not len(removed_ids) and (not len(self.doc_ids) or not len(added_ids)
                                     or added_ids.min() > self.doc_ids[-1]):
            appended = self._appended(tuple(terms), new_terms, new_docs, new_counts, added_ids, added_lengths)
            # its term ids are term_ids already: kept (the cached property), so that a writer that
            # extends it again does not build them anew (14 ms at 100,000 questions)
            appended.__dict__["term_ids"] = term_ids
            return appended
        gone = np.union1d(removed_ids, added_ids)
        keep_docs = ~np.isin(self.doc_ids, gone)
        keep_postings = ~np.isin(self.posting_docs, gone)
        term_of_posting = np.repeat(np.arange(len(self.terms), dtype=np.int32), np.diff(self.offsets))
        posting_terms = np.concatenate([term_of_posting[keep_postings], new_terms])
        posting_docs = np.concatenate([self.posting_docs[keep_postings], new_docs])
        posting_counts = np.concatenate([self.posting_counts[keep_postings], new_counts])
        order = np.lexsort((posting_docs, posting_terms))
        doc_ids = np.concatenate([self.doc_ids[keep_docs], added_ids])
        doc_lengths = np.concatenate([self.doc_lengths[keep_docs], added_lengths])
        doc_order = np.argsort(doc_ids, kind="stable")
        offsets = np.zeros(len(terms) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(np.bincount(posting_terms, minlength=len(terms)))
        return LexicalIndex(tuple(terms), doc_ids[doc_order], doc_lengths[doc_order], offsets,
                            posting_docs[order], posting_counts[order])

    def _appended(self, terms: tuple[str, ...], new_terms: np.ndarray, new_docs: np.ndarray,
                  new_counts: np.ndarray, added_ids: np.ndarray, added_lengths: np.ndarray) -> LexicalIndex:
        """This index with new questions whose ids are above every indexed one (what an index
        run that only adds makes): each new posting goes at the end of its term's postings, so
        the postings are copied once, not sorted again (at 100,000 questions, sorting took most
        of a small write's time)."""
        order = np.lexsort((new_docs, new_terms))
        new_terms, new_docs, new_counts = new_terms[order], new_docs[order], new_counts[order]
        ends = self.offsets[np.minimum(new_terms.astype(np.int64) + 1, len(self.terms))]
        offsets = np.zeros(len(terms) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(np.bincount(new_terms, minlength=len(terms)))
        offsets[: len(self.offsets)] += self.offsets
        offsets[len(self.offsets):] += self.offsets[-1]
        doc_order = np.argsort(added_ids, kind="stable")
        return LexicalIndex(terms, np.concatenate([self.doc_ids, added_ids[doc_order]]),
                            np.concatenate([self.doc_lengths, added_lengths[doc_order]]), offsets,
                            np.insert(self.posting_docs, ends, new_docs),
                            np.insert(self.posting_counts, ends, new_counts))

    @property
    def segments(self) -> tuple[LexicalIndex, ...]:
        return (self,)

    def postings_of(self, term: str) -> tuple[int, int]:
        """Where ``term``'s postings are: [start, end) (empty for a term it lacks)."""
        term_id = self.term_ids.get(term)
        if term_id is None:
            return 0, 0
        return int(self.offsets[term_id]), int(self.offsets[term_id + 1])

    @cached_property
    def _scoring(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(position in ``doc_ids``, term frequency, term frequency + k1 (1 - b), question
        length) of every posting, as a query reads them, computed once per segment: at 100,000
        questions, looking the positions up per query took most of its time. Nothing here
        depends on the other segments, so a segment kept from one state to the next keeps them."""
        positions = _positions(self.doc_ids, self.posting_docs)
        counts = self.posting_counts.astype(np.float64)
        return positions, counts, counts + K1 * (1.0 - B), self.doc_lengths[positions].astype(np.float64)

    @cached_property
    def _total_length(self) -> int:
        return int(self.doc_lengths.sum())

    def write(self, path: Path) -> None:
        with open(path, "wb") as handle:  # a handle: np.savez would add ".npz" to a file name
            np.savez(handle, terms=np.frombuffer("\n".join(self.terms).encode("utf-8"), dtype=np.uint8),
                     doc_ids=self.doc_ids, doc_lengths=self.doc_lengths, offsets=self.offsets,
                     posting_docs=self.posting_docs, posting_counts=self.posting_counts)

    @classmethod
    def read(cls, path: Path) -> LexicalIndex:
        """Raises ValueError or OSError on a file that is not a lexical index."""
        with np.load(path, allow_pickle=False) as arrays:
            text = arrays["terms"].tobytes().decode("utf-8")
            index = cls(tuple(text.split("\n")) if text else (), arrays["doc_ids"], arrays["doc_lengths"],
                        arrays["offsets"], arrays["posting_docs"], arrays["posting_counts"])
        if len(index.offsets) != len(index.terms) + 1 or index.offsets[-1] != len(index.posting_docs):
            raise ValueError("inconsistent postings")
        return index


class LexicalSegments(_Bm25Scoring):
    """A BM25 index kept in segments: the ``main`` one and the questions ``added`` since, whose
    ids are all above the main one's (an index run that only adds questions)."""

    def __init__(self, main: LexicalIndex, added: LexicalIndex | None = None) -> None:
        if added is not None and len(main) and len(added) and added.doc_ids[0] <= main.doc_ids[-1]:
            raise ValueError("the added questions' ids are not above the main segment's")
        self.main, self.added = main, added
        self.doc_ids = main.doc_ids if added is None else np.concatenate([main.doc_ids, added.doc_ids])

    @property
    def segments(self) -> tuple[LexicalIndex, ...]:
        return (self.main,) if self.added is None else (self.main, self.added)


_POSTINGS_PER_PART = 1 << 20


def _positions(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Where each of ``ids`` sits in ``sorted_ids`` (ValueError, where a table looks them up, for
    an id that is not there: a lexical file that is not this index's). Question ids are database rows,
    nearly dense: a table from id to position answers it in one gather (at 100,000 questions,
    850,000 postings: 2-17 ms against 52-66 for a binary search each, which a server repeats
    after every write); ids spread too thinly for a table are searched."""
    if not len(sorted_ids):
        return np.zeros(len(ids), dtype=np.int64)
    low, high = int(sorted_ids[0]), int(sorted_ids[-1])
    if high - low > POSITION_TABLE_SPREAD * len(sorted_ids):
        return np.searchsorted(sorted_ids, ids)
    missing = ValueError("a posting names a question the index does not hold")
    if len(ids) and (int(ids.min()) < low or int(ids.max()) > high):
        raise missing
    table = np.full(high - low + 1, -1, dtype=np.int64)
    table[sorted_ids - low] = np.arange(len(sorted_ids))
    positions = table[ids - low]
    if len(positions) and positions.min() < 0:
        raise missing
    return positions


def _postings(documents: Iterable[tuple[int, str]], terms: list[str],
              term_ids: dict[str, int]) -> tuple[np.ndarray, ...]:
    """(term, question id, count) of each posting of ``documents``, and their ids and lengths,
    as arrays; new terms are appended to ``terms`` and ``term_ids``. Python lists are turned into
    arrays every million postings, so that a large collection is never held as Python objects."""
    parts: list[tuple[np.ndarray, ...]] = []
    columns: tuple[list[int], ...] = ([], [], [], [], [])
    dtypes = (np.int32, np.int64, np.int32, np.int64, np.int32)

    def to_arrays() -> None:
        parts.append(tuple(np.asarray(c, dtype=t) for c, t in zip(columns, dtypes, strict=True)))
        for column in columns:
            column.clear()

    posting_terms, posting_docs, posting_counts, doc_ids, doc_lengths = columns
    for doc, text in documents:
        counts = Counter(lexical_tokens(text))
        doc_ids.append(doc)
        doc_lengths.append(sum(counts.values()))
        for term, count in counts.items():
            if term not in term_ids:
                term_ids[term] = len(terms)
                terms.append(term)
            posting_terms.append(term_ids[term])
            posting_docs.append(doc)
            posting_counts.append(count)
        if len(posting_terms) >= _POSTINGS_PER_PART:
            to_arrays()
    to_arrays()
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def rank_candidates(queries: Sequence[str],
                    candidates: Sequence[Sequence[tuple[str, str]]]) -> list[list[float]]:
    """BM25 scores of each query's own candidates ((id, text) pairs), with term statistics from
    all candidates of all queries, each distinct id counted once (so IDF is not estimated from
    ten documents alone)."""
    texts: dict[str, str] = {}
    for group in candidates:
        for candidate_id, text in group:
            texts.setdefault(candidate_id, text)
    position = {candidate_id: index for index, candidate_id in enumerate(texts)}
    index = LexicalIndex.build(enumerate(texts.values()))
    result = []
    for query, group in zip(queries, candidates, strict=True):
        scores = index.scores(query)
        result.append([float(scores[position[candidate_id]]) for candidate_id, _ in group])
    return result
