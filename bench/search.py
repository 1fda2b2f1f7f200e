"""Search: p50/p99 latency per query (single and batched) and recall@10 against exact search,
for each index type at 100k and 1M vectors, with bytes per vector on disk and in memory.

    .venv/bin/python -m bench.search --model runs/dan-conversations-nli/model [--sizes 100000 1000000]

Vectors are the model's embeddings of bench.harness.varied_questions; the 1,000 queries are real
questions with a word dropped (near but not equal to a stored one). Parameters are the ones the
indexer chooses for that size (indexer.index_types).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from askalike.core.loader import load_encoder
from askalike.indexer.index_types import INDEX_TYPES
from askalike.indexer.vector_index import (
    build_index,
    configure_search,
    read_index,
    training_sample,
    training_size,
    write_index,
)
from bench.harness import markdown_table, real_questions, recall_at_k, varied_questions, write_section

QUERIES = 1000
K = 10


LOAD_AND_MEASURE = """
import sys
from pathlib import Path
def resident():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096
from askalike.indexer.vector_index import read_index
before = resident()
index = read_index(Path(sys.argv[1]))
print(resident() - before)
"""


def loaded_bytes(path: Path) -> int:
    """Resident-set growth of a fresh process when it loads the index file."""
    child = subprocess.run([sys.executable, "-c", LOAD_AND_MEASURE, str(path)], capture_output=True,
                           text=True, check=True)
    return int(child.stdout.strip())


def latencies(index: faiss.Index, queries: np.ndarray) -> tuple[float, float, float]:
    """(p50 ms, p99 ms) of one query at a time, and ms per query in one batch of all."""
    faiss.omp_set_num_threads(1)  # a single interactive query: one thread, as the CLI would
    single = []
    for query in queries:
        started = time.perf_counter()
        index.search(query[None], K)
        single.append((time.perf_counter() - started) * 1000)
    faiss.omp_set_num_threads(0)
    started = time.perf_counter()
    index.search(queries, K)
    batched = (time.perf_counter() - started) * 1000 / len(queries)
    return float(np.percentile(single, 50)), float(np.percentile(single, 99)), batched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--types", nargs="+", default=list(INDEX_TYPES), choices=INDEX_TYPES)
    args = parser.parse_args()
    encoder = load_encoder(args.model)
    texts = varied_questions(max(args.sizes))
    started = time.perf_counter()
    vectors = encoder.encode(texts, batch_size=256)
    print(f"embedded {len(texts):,} questions in {time.perf_counter() - started:.0f} s", flush=True)
    queries = encoder.encode([" ".join(t.split()[1:]) for t in real_questions(QUERIES)])
    rows = []
    for size in args.sizes:
        data, ids = vectors[:size], np.arange(size, dtype=np.int64)
        flat = faiss.IndexFlatIP(data.shape[1])
        flat.add(data)
        exact = flat.search(queries, K)[1]
        del flat
        for index_type in args.types:
            parameters = INDEX_TYPES[index_type].parameters(size, data.shape[1])
            started = time.perf_counter()
            sample_size = training_size(parameters)
            training = training_sample([(ids, data)], size, sample_size) if sample_size else None
            built = build_index(index_type, parameters, data.shape[1], [(ids, data)], training)
            build_seconds = time.perf_counter() - started
            with tempfile.TemporaryDirectory() as scratch:
                path = Path(scratch) / "index.faiss"
                write_index(built, path)
                disk = path.stat().st_size
                memory = loaded_bytes(path)
                del built
                index = read_index(path)
            configure_search(index, parameters)
            p50, p99, batched = latencies(index, queries)
            recall = recall_at_k(index.search(queries, K)[1], exact)
            del index
            shown = {k: v for k, v in parameters.items() if k != "chosen_for"}
            print(index_type, size, round(p50, 3), round(p99, 3), round(batched, 4), round(recall, 4),
                  flush=True)
            rows.append((f"{size:,}", index_type, shown or "", f"{build_seconds:,.1f}", f"{p50:.2f}",
                         f"{p99:.2f}", f"{batched:.3f}", f"{recall:.3f}", f"{disk / size:,.0f}",
                         f"{memory / size:,.0f}"))
    body = (f"Model `{args.model}` ({vectors.shape[1]} dimensions); {QUERIES:,} queries; single "
            "queries on one thread, batched on all; recall@10 against exact inner-product search; "
            "memory is the resident-set growth of a fresh process loading the file.\n\n"
            + markdown_table(["vectors", "type", "parameters", "build s", "p50 ms", "p99 ms",
                              "batched ms/query", "recall@10", "bytes/vector disk",
                              "bytes/vector memory"], rows))
    write_section("search", "Search latency and recall", f"python -m bench.search --model {args.model} "
                  f"--sizes {' '.join(map(str, args.sizes))}", body)


if __name__ == "__main__":
    main()
