"""Near-duplicate groups across a whole collection, as an FAQ or forum owner cleans up: every
question's nearest neighbours come from the index's FAISS index (k-NN, never all pairs, looked at
deeper where all of them are the same question), the pairs that the model's judge calls the same
question (``retrieval.judgement``: a match of ``min_match`` or more) are found, and each group is
a centre with the questions judged the same as it (``centred_groups``): a group never chains
neighbours of neighbours, and its size comes from the judgement, not from how many neighbours
were looked at.

Pairs are judged by meaning only, on the cosine of the stored (exact) vectors: a BM25 score has
no scale that one threshold could mean across questions. ``retrieval.duplicates`` does the same
within one search's hits; this module works on the collection and needs no encoder, since every
question's vector is stored."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from askalike.core.dates import DateOrder
from askalike.indexer.directory import OpenIndex
from askalike.indexer.store import IndexReading, StoredQuestion
from askalike.retrieval.judgement import SAME_QUESTION, Judge
from askalike.retrieval.searcher import SearchError, SearchFilters

DEFAULT_NEIGHBOURS = 10  # nearest questions looked at first per question (deeper where all are the same)
QUERY_CHUNK = 2048  # questions whose neighbours one FAISS call finds

Progress = Callable[[int, int], None]  # (questions done, questions to do)


class NeighbourSearch(Protocol):
    """What proposes each question's nearest neighbours: an index's FAISS files, or an exact search on a
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
    match: float  # how likely it asks the same question as the group's centre (1 for the centre)

    def as_json(self) -> dict[str, Any]:
        question = self.question
        return {"id": question.external_id, "source": question.source, "subject": question.subject,
                "date": question.date, "match": round(self.match, 4),
                "metadata": {k: v for k, v in question.metadata.items() if k != "comments"}}


@dataclass(frozen=True)
class DuplicateGroup:
    """Questions judged the same question as the first, the group's centre; the others by their
    match to it."""

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
    filters = SearchFilters(date_from=since, date_order=date_order or IndexReading.of(index.store).date_order)
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
                    floor: float, on_progress: Callable[[int], None] | None = None,
                    ) -> tuple[set[tuple[int, int]], list[int]]:
    """(smaller id, larger id) of each query question (chunks of ids and vectors) and each of its
    ``k`` nearest whose inner product reaches ``floor``, itself left out; and the queries all of
    whose ``k`` nearest reached it (more may: ``similar_pairs`` looks deeper)."""
    candidates: set[tuple[int, int]] = set()
    saturated: list[int] = []
    done = 0
    for query_ids, vectors in queries:
        cosines, found = search.search(vectors, k)
        for query, row_cosines, row_ids in zip(query_ids.tolist(), cosines, found, strict=True):
            reached = (row_cosines >= floor) & (row_ids >= 0)
            candidates.update((min(query, other), max(query, other))
                              for other in row_ids[reached].tolist() if other != query)
            if reached.all():
                saturated.append(query)
        done += len(query_ids)
        if on_progress is not None:
            on_progress(done)
    return candidates, saturated


def _chunks(index: OpenIndex, ids: Sequence[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    return _query_vectors(index, np.asarray(ids, dtype=np.int64))


def similar_pairs(index: OpenIndex, min_cosine: float, ids: np.ndarray | None = None,
                  neighbours: int = DEFAULT_NEIGHBOURS, on_progress: Progress | None = None,
                  search: NeighbourSearch | None = None) -> list[Pair]:
    """The pairs of stored questions whose cosine reaches ``min_cosine``, among each question's
    nearest (only of the questions in ``ids``, against the whole collection; None: every
    question): ``neighbours`` of them, and twice as many again for a question all of whose
    nearest reached it, until some do not, so that no question's pairs are cut off. ``search``
    (default: the index's FAISS index, with its own search settings) proposes the candidates;
    each is then scored on the stored vectors, so the cosines are exact whatever the index type,
    and ids that FAISS still holds but the store no longer does drop out."""
    search = search or index.faiss
    total = index.store.count() if ids is None else len(ids)
    stored_count = index.faiss.ntotal
    wanted = min(neighbours + 1, stored_count)  # + 1: a question finds itself
    floor = min_cosine - 2 * index.faiss.cosine_error
    progress = None if on_progress is None else lambda done: on_progress(done, total)
    candidates, saturated = candidate_pairs(_query_vectors(index, ids), search, wanted, floor, progress)
    while saturated and wanted < stored_count:
        wanted = min(2 * wanted, stored_count)
        deeper, saturated = candidate_pairs(_chunks(index, saturated), search, wanted, floor)
        candidates |= deeper
    involved = sorted({i for pair in candidates for i in pair})
    stored = index.store.vectors_of(involved, index.manifest.encoder.dim)
    pairs = [Pair(a, b, float(stored[a] @ stored[b])) for a, b in sorted(candidates)
             if a in stored and b in stored]
    return [pair for pair in pairs if pair.cosine >= min_cosine]


def centred_groups(pairs: Sequence[Pair]) -> list[tuple[int, list[int]]]:
    """(centre, members) groups from the pairs judged the same question: the question with the
    most such partners not yet grouped (then the larger sum of their cosines, then the first
    indexed) is a centre, and those partners its members; then the next, until no question has
    a partner left. Every member is judged the same question as its centre, so a group never
    chains a, b, c where a and c differ; a question joins one group only."""
    partners: dict[int, dict[int, float]] = {}
    for pair in pairs:
        partners.setdefault(pair.first, {})[pair.second] = pair.cosine
        partners.setdefault(pair.second, {})[pair.first] = pair.cosine
    grouped: set[int] = set()
    groups: list[tuple[int, list[int]]] = []
    heap = [(-len(others), -sum(others.values()), node) for node, others in partners.items()]
    heapq.heapify(heap)
    while heap:
        count, weight, node = heapq.heappop(heap)
        if node in grouped:
            continue
        free = {other: cosine for other, cosine in partners[node].items() if other not in grouped}
        if (-len(free), -sum(free.values())) != (count, weight):  # partners grouped since: re-rank
            if free:
                heapq.heappush(heap, (-len(free), -sum(free.values()), node))
            continue
        members = sorted(free, key=lambda other: (-round(free[other], 4), other))
        groups.append((node, members))
        grouped.update([node, *members])
    return groups


def _group(centre: int, members: list[int], cosines: dict[int, float], judge: Judge,
           questions: dict[int, StoredQuestion]) -> DuplicateGroup:
    alike = [GroupMember(questions[i], float(judge.probability(cosines[i]))) for i in members]
    return DuplicateGroup((GroupMember(questions[centre], 1.0), *alike))


def duplicate_groups(index: OpenIndex, judge: Judge, min_match: float = SAME_QUESTION,
                     since: str | None = None, date_order: DateOrder | None = None,
                     neighbours: int = DEFAULT_NEIGHBOURS, on_progress: Progress | None = None,
                     search: NeighbourSearch | None = None) -> list[DuplicateGroup]:
    """The groups of questions that ``judge`` (the index model's, ``retrieval.judgement``) calls
    the same question with a match of ``min_match`` or more, each around its centre
    (``centred_groups``), the largest first, then in the order of their centres. With ``since``,
    the groups that hold a question dated on or after it, whole: the partners of those questions
    are looked at as well, so that each group is the one a run over the whole collection would
    centre there. ``search`` proposes the neighbours (see ``similar_pairs``)."""
    if not 0.0 < min_match <= 1.0:
        raise SearchError(f"min match {min_match}: must be above 0 and at most 1 (100%)")
    min_cosine = judge.cosine_for(min_match)
    checked = questions_to_check(index, since, date_order)
    pairs = similar_pairs(index, min_cosine, checked, neighbours, on_progress, search)
    if checked is not None:  # the partners' own pairs, so that a partner can be a whole centre
        partners = sorted({i for pair in pairs for i in (pair.first, pair.second)} - set(checked.tolist()))
        known = {(pair.first, pair.second) for pair in pairs}
        pairs += [pair for pair in similar_pairs(index, min_cosine, np.asarray(partners, dtype=np.int64),
                                                 neighbours, None, search)
                  if (pair.first, pair.second) not in known]
    groups = centred_groups(pairs)
    if checked is not None:
        new = set(checked.tolist())
        groups = [(centre, members) for centre, members in groups if not new.isdisjoint([centre, *members])]
    groups.sort(key=lambda group: (-len(group[1]), group[0]))
    cosine = {(pair.first, pair.second): pair.cosine for pair in pairs}
    questions = index.store.fetch([i for centre, members in groups for i in (centre, *members)])
    return [_group(centre, members, {i: cosine[min(centre, i), max(centre, i)] for i in members}, judge,
                   questions) for centre, members in groups]
