"""The txtai peer, run by the interpreter of txtai's own virtual environment (it imports nothing
of askalike), for bench/serve.py and bench/peer_scale.py:

    PYTHON bench/txtai_peer.py build MODEL_DIR TEXTS.json INDEX_DIR [--components IDMap,HNSW32]
                                     [--hybrid] [--content]
    PYTHON bench/txtai_peer.py search INDEX_DIR QUERIES.json [--k 10]

``build`` embeds the texts (ids "c0", "c1", ..., as bench/serve.py's collection) with the
sentence-transformers model at MODEL_DIR into txtai's faiss backend and saves the index to
INDEX_DIR. ``--components`` is the FAISS factory string that backend builds (txtai's
``faiss.components`` setting; without it txtai picks ``IDMap,Flat`` up to 5,000 texts and IVF
above); txtai adds with ids, so an HNSW index needs ``IDMap,HNSW32``, and txtai has no setting
for HNSW's efConstruction or efSearch (FAISS's defaults, 40 and 16, apply). ``--hybrid`` adds
txtai's BM25 index beside the dense one (its ``hybrid: true``: a search fuses both, weights 0.5
each); ``--content`` stores the texts (txtai's ``content: true``), as its API serves them.
``search`` loads an index and searches the queries one at a time (txtai's search of a text:
encoding included). Each prints one line of JSON: build seconds and peak RSS, or p50/p99 ms and
the positions of the texts each query found (``found``).
The caller sets the threads (bench.harness.thread_env) in the environment.
"""

import argparse
import json
import re
import resource
import statistics
import time
from pathlib import Path

from txtai import Embeddings


def peak_rss_mib() -> float:
    """This process's own peak (VmHWM: ru_maxrss would carry the parent's over; bench.harness)."""
    match = re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) / 1024 if match else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    with open(args.texts, encoding="utf-8") as handle:
        texts = json.load(handle)
    config = {"path": args.model, "content": args.content, "backend": "faiss"}
    if args.components:
        config["faiss"] = {"components": args.components}
    if args.hybrid:
        config["hybrid"] = True
    embeddings = Embeddings(config)
    embeddings.index({"id": f"c{number}", "text": text} for number, text in enumerate(texts))
    embeddings.save(args.index)
    return {"build_s": time.perf_counter() - started, "peak_rss_mib": peak_rss_mib(),
            "components": embeddings.config.get("build", {}).get("settings", {}).get("components")}


def search(args: argparse.Namespace) -> dict:
    with open(args.queries, encoding="utf-8") as handle:
        queries = json.load(handle)
    embeddings = Embeddings()
    embeddings.load(args.index)
    embeddings.search(queries[0], args.k)  # warm-up
    times, found = [], []
    for query in queries:
        started = time.perf_counter()
        results = embeddings.search(query, args.k)
        times.append((time.perf_counter() - started) * 1000)
        found.append([int(str(result[0] if isinstance(result, tuple) else result["id"])[1:])
                      for result in results])
    cuts = statistics.quantiles(times, n=100, method="inclusive")
    return {"p50_ms": statistics.median(times), "p99_ms": cuts[98], "found": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    builder = commands.add_parser("build")
    builder.add_argument("model")
    builder.add_argument("texts")
    builder.add_argument("index")
    builder.add_argument("--components")
    builder.add_argument("--hybrid", action="store_true")
    builder.add_argument("--content", action="store_true")
    searcher = commands.add_parser("search")
    searcher.add_argument("index")
    searcher.add_argument("queries")
    searcher.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(build(args) if args.command == "build" else search(args)))


if __name__ == "__main__":
    main()
