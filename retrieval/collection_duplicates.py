"""Near-duplicate groups across a whole collection, as an FAQ or forum owner cleans up: every
question's nearest neighbours come from the index's FAISS index (k-NN, never all pairs), the
pairs whose cosine reaches a threshold are joined into groups (union-find; or, strict, split so
that every member reaches it against the group's centre), and each group lists its most central
member first.

Pairs are judged by meaning only, on the cosine of the stored (exact) vectors: a BM25 score has
no scale that one threshold could mean across questions. ``retrieval.duplicates`` does the same
within one search's hits; this module works on the collection and needs no encoder, since every
question's vector is stored."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from core.dates import DateOrder
from indexer.directory import OpenIndex
from indexer.store import DATE_ORDER_SETTING, StoredQuestion
from indexer.vector_index import cosine_error
from retrieval.searcher import SearchError, SearchFilters

# the cosine a pair needs to be called near-duplicates: chosen on CQA dev 2016, where the groups
# at 65% or more are at least 97% right for both shipped models, with a margin: models/accurate's
# pairs between 60 and 70% are mostly the same topic, not the same question (docs/results.md)
DEFAULT_MIN_MATCH = 0.7
DEFAULT_NEIGHBOURS = 10  # nearest questions looked at per question
CENTRE_TIE = 1e-6  # closeness to the mean vector within which members count as equally central
QUERY_CHUNK = 2048  # questions whose neighbours one FAISS call finds

Progress = Callable[[int, int], None]  # (questions done, questions to do)


class NeighbourSearch(Protocol):
    """What proposes each question's nearest neighbours: a FAISS index, or an exact search on a
    GPU (``train.gpu_search``). (inner products, ids) of each query's ``k`` best, -1 ids padding."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(frozen=True)
class Pair:
    """Two stored questions (row ids, ``first < second``) and the cosine of their vectors."""

    first: int
    second: int
    cosine: float


@dataclass(frozen=True)
class GroupMember:
    question: StoredQuestion
    match: float  # cosine to the group's central member, clipped at 0 (1 for the central one)

    def as_json(self) -> dict[str, Any]:
        question = self.question
        return {"id": question.external_id, "source": question.source, "subject": question.subject,
                "date": question.date, "match": round(self.match, 4),
                "metadata": {k: v for k, v in question.metadata.items() if k != "comments"}}


@dataclass(frozen=True)
class DuplicateGroup:
    """Near-duplicate questions, the most central first (``centre_first``), then by their match
    to it."""

    members: tuple[GroupMember, ...]

    def as_json(self, number: int) -> dict[str, Any]:
        return {"group": number, "size": len(self.members),
                "members": [member.as_json() for member in self.members]}


def questions_to_check(index: OpenIndex, since: str | None = None,
                       date_order: DateOrder | None = None) -> np.ndarray | None:
    """Row ids of the questions dated on or after ``since`` (None: every question). A
    SearchError for a date that is not one, and for an empty index."""
    if index.faiss.ntotal == 0:
        raise SearchError(f"the index at {index.directory} is empty: add questions with "
                          "`askalike index SOURCE`")
    if since is None:
        return None
    remembered = index.store.setting(DATE_ORDER_SETTING)  # how the index's dates were read
    if date_order is None and remembered in DateOrder.__members__:
        date_order = DateOrder(remembered)
    filters = SearchFilters(date_from=since, date_order=date_order)
    return index.store.ids_matching(dated_from=filters.window[0])


def _query_vectors(index: OpenIndex, ids: np.ndarray | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(row ids, stored vectors) of the questions to check, a chunk at a time."""
    dim = index.manifest.encoder.dim
    if ids is None:
        yield from index.store.vectors(dim, chunk=QUERY_CHUNK)
        return
    for start in range(0, len(ids), QUERY_CHUNK):
        stored = index.store.vectors_of(ids[start:start + QUERY_CHUNK].tolist(), dim)
        if stored:
            yield np.fromiter(stored, dtype=np.int64), np.stack(list(stored.values()))


def candidate_pairs(queries: Iterable[tuple[np.ndarray, np.ndarray]], search: NeighbourSearch, k: int,
                    floor: float, on_progress: Callable[[int], None] | None = None) -> set[tuple[int, int]]:
    """(smaller id, larger id) of each query question (chunks of ids and vectors) and each of its
    ``k`` nearest whose inner product reaches ``floor``, itself left out."""
    candidates: set[tuple[int, int]] = set()
    done = 0
    for query_ids, vectors in queries:
        cosines, found = search.search(vectors, k)
        for query, row_cosines, row_ids in zip(query_ids.tolist(), cosines, found, strict=True):
            candidates.update((min(query, other), max(query, other))
                              for other in row_ids[(row_cosines >= floor) & (row_ids >= 0)].tolist()
                              if other != query)
        done += len(query_ids)
        if on_progress is not None:
            on_progress(done)
    return candidates


def similar_pairs(index: OpenIndex, min_cosine: float, ids: np.ndarray | None = None,
                  neighbours: int = DEFAULT_NEIGHBOURS, on_progress: Progress | None = None,
                  search: NeighbourSearch | None = None) -> list[Pair]:
    """The pairs of stored questions whose cosine reaches ``min_cosine``, found among each
    question's ``neighbours`` nearest (only of the questions in ``ids``, against the whole
    collection; None: every question). ``search`` (default: the index's FAISS index, with its
    own search settings) proposes the candidates; each is then scored on the stored vectors, so
    the cosines are exact whatever the index type, and ids that FAISS still holds but the store
    no longer does drop out."""
    total = index.store.count() if ids is None else len(ids)
    wanted = min(neighbours + 1, int(index.faiss.ntotal))  # + 1: a question finds itself
    floor = min_cosine - 2 * cosine_error(index.faiss)
    progress = None if on_progress is None else lambda done: on_progress(done, total)
    candidates = candidate_pairs(_query_vectors(index, ids), search or index.faiss, wanted, floor, progress)
    involved = sorted({i for pair in candidates for i in pair})
    stored = index.store.vectors_of(involved, index.manifest.encoder.dim)
    pairs = [Pair(a, b, float(stored[a] @ stored[b])) for a, b in sorted(candidates)
             if a in stored and b in stored]
    return [pair for pair in pairs if pair.cosine >= min_cosine]


def connected_groups(pairs: Sequence[Pair], min_cosine: float) -> list[list[int]]:
    """The row ids joined by the pairs whose cosine reaches ``min_cosine`` (union-find), each
    group sorted, groups in the order of their smallest id."""
    parent: dict[int, int] = {}

    def root(node: int) -> int:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]  # path halving
            node = parent[node]
        return node

    for pair in pairs:
        if pair.cosine >= min_cosine:
            first, second = root(pair.first), root(pair.second)
            if first != second:
                parent[max(first, second)] = min(first, second)
    groups: dict[int, list[int]] = {}
    for node in sorted(parent):
        groups.setdefault(root(node), []).append(node)
    return list(groups.values())


def centre_first(ids: Sequence[int], vectors: dict[int, np.ndarray]) -> tuple[list[int], np.ndarray]:
    """``ids`` with the question closest to their mean vector first (of equally close ones, the
    first indexed), then the others by their cosine to it (equal ones in the order indexed), and
    those cosines in that order."""
    ids = sorted(ids)
    matrix = np.stack([vectors[i] for i in ids])
    closeness = matrix @ matrix.mean(axis=0)
    # the first indexed among equally central ones (the two of a pair always are)
    central = int(np.flatnonzero(closeness >= closeness.max() - CENTRE_TIE)[0])
    matches = matrix @ matrix[central]
    # matches equal as shown (4 decimals, as JSON gives them) in the order indexed
    order = sorted(range(len(ids)), key=lambda j: (j != central, -round(float(matches[j]), 4), ids[j]))
    return [ids[j] for j in order], matches[order]


def centred_groups(pairs: Sequence[Pair], vectors: dict[int, np.ndarray],
                   min_cosine: float) -> list[list[int]]:
    """Strict groups of row ids: each member at least ``min_cosine`` alike to the group's first,
    most central member. The pairs that reach ``min_cosine`` are joined (``connected_groups``);
    a group whose members are not all that alike to its centre (a chain a, b, c where a and c
    differ) keeps those that are, and the rest are grouped again by the pairs among them, so
    that a low threshold cannot chain a whole topic into one group."""
    by_node: dict[int, list[Pair]] = {}
    for pair in pairs:
        if pair.cosine >= min_cosine:
            by_node.setdefault(pair.first, []).append(pair)
    pending = connected_groups(pairs, min_cosine)
    groups: list[list[int]] = []
    while pending:
        ordered, matches = centre_first(pending.pop(), vectors)
        # the centre is in a pair of the group, so at least its partner stays with it
        groups.append([ordered[0], *(i for i, match in zip(ordered[1:], matches[1:], strict=True)
                                     if match >= min_cosine)])
        rest = set(ordered) - set(groups[-1])
        pending += connected_groups([pair for node in rest for pair in by_node.get(node, ())
                                     if pair.second in rest], min_cosine)
    return groups


def _group(ids: list[int], vectors: dict[int, np.ndarray],
           questions: dict[int, StoredQuestion]) -> DuplicateGroup:
    ordered, matches = centre_first(ids, vectors)
    return DuplicateGroup(tuple(GroupMember(questions[i], max(0.0, min(1.0, float(match))))
                                for i, match in zip(ordered, matches, strict=True)))


def duplicate_groups(index: OpenIndex, min_match: float = DEFAULT_MIN_MATCH, since: str | None = None,
                     date_order: DateOrder | None = None, neighbours: int = DEFAULT_NEIGHBOURS,
                     strict: bool = False, on_progress: Progress | None = None,
                     search: NeighbourSearch | None = None) -> list[DuplicateGroup]:
    """The groups of near-duplicate questions of the collection, the largest first, then in the
    order of their first indexed question: the pairs at ``min_match`` or more joined
    (``connected_groups``), or with ``strict`` each member that alike to its group's centre
    (``centred_groups``). With ``since``, only the groups that hold a question dated on or after it.
    ``search`` proposes the neighbours (see ``similar_pairs``)."""
    if not 0.0 < min_match <= 1.0:
        raise SearchError(f"min match {min_match}: must be above 0 and at most 1 (100%)")
    checked = questions_to_check(index, since, date_order)
    pairs = similar_pairs(index, min_match, checked, neighbours, on_progress, search)
    involved = sorted({i for pair in pairs for i in (pair.first, pair.second)})
    vectors = index.store.vectors_of(involved, index.manifest.encoder.dim)
    groups = centred_groups(pairs, vectors, min_match) if strict else connected_groups(pairs, min_match)
    if checked is not None:
        new = set(checked.tolist())
        groups = [ids for ids in groups if not new.isdisjoint(ids)]
    groups.sort(key=lambda ids: (-len(ids), min(ids)))
    questions = index.store.fetch([i for ids in groups for i in ids])
    return [_group(ids, vectors, questions) for ids in groups]
