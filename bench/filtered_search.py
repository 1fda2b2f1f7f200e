"""Filtered and large-k dense search on each index type: the hits a search returns and its
recall against exact search, for filters passing 0.1% to 100% of the questions and k of 10, 100
and 1,000, with the milliseconds a query takes.

    .venv/bin/python -m bench.filtered_search [--model models/fast] [--size 100000] \\
        [--types hnsw ivf ivfpq]

Texts are distinct conversation texts (bench.harness.conversation_texts), each in one of 1,000
categories drawn at random, so that a filter on n categories passes about n / 1,000 of them;
``QUERIES`` texts held out are the queries. The collection is indexed once (flat), then each type
is rebuilt from the stored vectors in the same directory (``askalike index --index-type``), so
every type answers over the same questions and row ids. Each search is ``Searcher.search_many``
(what ``askalike search --mode dense`` runs) over all queries at once; recall@k is against the
flat index's answers (the share of the exact best min(k, passing) found), "hits" the share of
min(k, passing) returned. "FAISS alone" is one search of the index with the settings its build
recorded and the filter's id selector (what askalike did before issue 40). Milliseconds are per
query, the filter resolved in the database included.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from askalike.indexer.build import IndexOptions, index_sources
from askalike.indexer.vector_index import search_parameters
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.searcher import Searcher, SearchFilters
from bench.harness import conversation_texts, markdown_table, write_section

QUERIES = 50
CATEGORIES = 1000
SHARES = (0.001, 0.01, 0.1, 0.5, 1.0)
KS = (10, 100, 1000)
TYPES = ("hnsw", "ivf", "ivfpq")


def write_source(texts: list[str], path: Path) -> None:
    """The texts as JSON Lines, each in a category c0 .. c999 drawn with a fixed seed."""
    draw = random.Random(0)
    with open(path, "w", encoding="utf-8") as handle:
        for number, text in enumerate(texts):
            handle.write(json.dumps({"id": number, "subject": text,
                                     "category": f"c{draw.randrange(CATEGORIES)}"}) + "\n")


def share_filter(share: float) -> SearchFilters | None:
    """A filter on the first share * CATEGORIES categories (None: no filter)."""
    if share >= 1.0:
        return None
    return SearchFilters(categories=tuple(f"c{i}" for i in range(round(share * CATEGORIES))))


def answers(searcher: Searcher, queries: list[str], k: int,
            filters: SearchFilters | None) -> tuple[list[list[int]], float]:
    """Each query's row ids, best first, and the milliseconds per query."""
    started = time.perf_counter()
    results = searcher.search_many(queries, k, filters, SearchMode.dense)
    elapsed = (time.perf_counter() - started) * 1000 / len(queries)
    return [[r.row_id for r in found] for found in results], elapsed


def passing_ids(searcher: Searcher, filters: SearchFilters | None) -> np.ndarray | None:
    """The row ids that pass (None: all)."""
    return None if filters is None else searcher.index.store.ids_matching((), filters.categories)


def faiss_alone(searcher: Searcher, queries: list[str], k: int,
                filters: SearchFilters | None) -> list[list[int]]:
    """One FAISS search with the recorded settings and the filter's selector, as before issue 40."""
    index = searcher.index.faiss.main
    _, ids = index.search(searcher.encoder.encode(queries), k,
                          params=search_parameters(index, passing_ids(searcher, filters), {}))
    return [[int(i) for i in row if i >= 0] for row in ids]


def shares_found(found: list[list[int]], exact: list[list[int]]) -> tuple[float, float]:
    """(mean share of the exact answer's hits returned, mean recall of the exact answer)."""
    hits = [len(f) / len(e) for f, e in zip(found, exact, strict=True) if e]
    recall = [len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True) if e]
    return float(np.mean(hits)), float(np.mean(recall))


Case = tuple[float, int]  # (share of the questions the filter passes, k)
Answers = tuple[list[list[int]], float]  # each query's row ids, and ms per query


def measure(searcher: Searcher, queries: list[str], exact: dict[Case, Answers]) -> list[tuple[object, ...]]:
    """A row per case: passing, hits, recall, ms, flat ms, and FAISS alone's hits and recall."""
    rows = []
    for (share, k), (truth, flat_ms) in exact.items():
        filters = share_filter(share)
        found, ms = answers(searcher, queries, k, filters)
        hits, recall = shares_found(found, truth)
        alone_hits, alone_recall = shares_found(faiss_alone(searcher, queries, k, filters), truth)
        passing = searcher.count if filters is None else len(passing_ids(searcher, filters))
        rows.append((f"{share:.1%}", f"{passing:,}", k, f"{hits:.3f}", f"{recall:.3f}", f"{ms:.1f}",
                     f"{flat_ms:.1f}", f"{alone_hits:.3f}", f"{alone_recall:.3f}"))
        print(searcher.index.manifest.index_type, rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/fast")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=TYPES)
    args = parser.parse_args()
    texts = conversation_texts(args.size + QUERIES)
    corpus, queries = texts[: args.size], texts[args.size :]
    rows = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        source, index_dir = Path(scratch) / "texts.jsonl", Path(scratch) / "index"
        write_source(corpus, source)
        for index_type in ("flat", *args.types):  # flat first: the truth; then rebuilt from the store
            started = time.perf_counter()
            report = index_sources(index_dir, [source], args.model if index_type == "flat" else None,
                                   options=IndexOptions(index_type=index_type, show_progress=False))
            print(f"{index_type}: {time.perf_counter() - started:.0f} s, {report.parameters}", flush=True)
            with Searcher(index_dir) as searcher:
                if index_type == "flat":
                    exact = {(share, k): answers(searcher, queries, k, share_filter(share))
                             for share in SHARES for k in KS}
                else:
                    rows += [(index_type, *row) for row in measure(searcher, queries, exact)]
    body = (f"Model `{args.model}`; {args.size:,} distinct conversation texts in {CATEGORIES:,} random "
            f"categories (a filter on n of them passes about n / {CATEGORIES:,}); {QUERIES} held-out "
            "texts as queries, searched in one batch; recall@k against the flat index over the same "
            "questions; hits: the share of min(k, passing) returned; ms per query, filter included. "
            "FAISS alone: one search with the build's recorded settings and the filter's id selector "
            "(askalike before issue 40).\n\n"
            + markdown_table(["type", "filter passes", "questions passing", "k", "hits", "recall@k",
                              "ms/query", "flat ms/query", "FAISS alone: hits", "FAISS alone: recall@k"],
                             rows))
    write_section("filtered-search", "Filtered and large-k search on approximate indexes (issue 40)",
                  f"python -m bench.filtered_search --model {args.model} --size {args.size}", body)


if __name__ == "__main__":
    main()
