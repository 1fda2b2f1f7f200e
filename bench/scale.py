"""Scale: flat, hnsw and ivfpq (with fp16 refinement) indexes of 100k, 300k and 1M distinct real
texts: build time and peak memory of the index run, index size, recall@10 against exact search,
and p50/p99 latency per query after encoding.

    .venv/bin/python -m bench.scale [--model models/fast] [--sizes 100000 300000 1000000] \\
        [--types flat hnsw ivfpq] [--out docs/scale]

Texts are the distinct inputs and responses of the conversation files (bench.harness
.conversation_texts); 1,000 of them, spread over the texts read, are held out as queries. Each
index is built by ``index_sources`` (what ``askalike index`` runs, with the type's parameters
chosen for the size) in a fresh process, whose own peak resident memory (VmHWM) is reported; its
JSON Lines source is written before the clock starts. Latency is the FAISS search of one query
at a time with the index's recorded search settings, on one thread; the exact answers are the
flat index's. Writes scale.json and scale.png (with matplotlib: pip install -e .[dev])
to --out and a section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from askalike.indexer.index_type_choice import auto_index_type
from bench.harness import (
    ROOT,
    conversation_texts,
    markdown_table,
    peak_rss_mib,
    recall_at_k,
    run_child,
    write_section,
)

QUERIES = 1000
K = 10
TYPES = ("flat", "hnsw", "ivfpq")


def build_in_child(source: Path, index_dir: Path, model: str, index_type: str,
                   threads: int | None = None) -> dict[str, Any]:
    """Index ``source`` into a new ``index_dir`` in a fresh process (under ``thread_env(threads)``
    if given); its wall time and peak RSS."""
    return run_child("bench.scale", ["--child", str(index_dir), "--source", str(source), "--model", model,
                                     "--types", index_type], f"indexing {index_type}", threads=threads)


def child_main(index_dir: Path, source: Path, model: str, index_type: str) -> None:
    from askalike.indexer.build import IndexOptions, index_sources

    started = time.perf_counter()
    report = index_sources(index_dir, [source], model,
                           options=IndexOptions(index_type=index_type, show_progress=False))
    print(json.dumps({"build_s": time.perf_counter() - started, "embed_s": report.embed_seconds,
                      "peak_rss_mib": peak_rss_mib(),
                      "parameters": {k: v for k, v in report.parameters.items() if k != "chosen_for"}}))


def latencies_ms(index: faiss.Index, queries: np.ndarray) -> tuple[float, float, np.ndarray]:
    """p50 and p99 of one query at a time on one thread (a single query gains nothing from more,
    and OpenMP's hand-offs cost milliseconds on a busy machine), and the ids found."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    times, found = [], []
    for query in queries:
        started = time.perf_counter()
        _, ids = index.search(query[None], K)
        times.append((time.perf_counter() - started) * 1000)
        found.append(ids[0])
    faiss.omp_set_num_threads(threads)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99)), np.stack(found)


def measure(index_dir: Path, queries: np.ndarray, exact: np.ndarray | None) -> dict[str, Any]:
    """Size, latency and recall of a built index (exact None: this is the exact one)."""
    from askalike.indexer.manifest import load_faiss, read_manifest

    manifest = read_manifest(index_dir)
    index = load_faiss(index_dir, manifest)
    p50, p99, found = latencies_ms(index, queries)
    return {"faiss_mib": (manifest.faiss_bytes + manifest.added_bytes) / 2**20,
            "directory_mib": sum(f.stat().st_size for f in index_dir.rglob("*") if f.is_file()) / 2**20,
            "p50_ms": p50, "p99_ms": p99, "found": found,
            "recall_at_10": 1.0 if exact is None else recall_at_k(found, exact)}


def split_texts(total: int) -> tuple[list[str], list[str]]:
    """(corpus, queries): ``total`` texts, every n-th held out as one of QUERIES queries."""
    texts = conversation_texts(total + QUERIES)
    step = len(texts) // QUERIES
    held = set(range(step - 1, step * QUERIES, step))
    return [t for i, t in enumerate(texts) if i not in held], [texts[i] for i in sorted(held)]


def run_size(size: int, corpus: list[str], queries: np.ndarray, args: argparse.Namespace,
             scratch: Path) -> list[dict[str, Any]]:
    source = scratch / f"texts-{size}.jsonl"
    with open(source, "w", encoding="utf-8") as handle:
        for number, text in enumerate(corpus[:size]):
            handle.write(json.dumps({"id": number, "subject": text}) + "\n")
    rows, exact = [], None
    for index_type in ("flat", *[t for t in args.types if t != "flat"]):  # flat first: the truth
        index_dir = scratch / f"{index_type}-{size}"
        built = build_in_child(source, index_dir, args.model, index_type)
        measured = measure(index_dir, queries, exact)
        found = measured.pop("found")
        if index_type == "flat":  # row ids agree: each fresh database numbers the rows in order
            exact = found
        shutil.rmtree(index_dir)
        if index_type in args.types:
            row = {"size": size, "type": index_type, "auto_picks": auto_index_type(size)[0],
                   **built, **measured}
            print(json.dumps(row), flush=True)
            rows.append(row)
    source.unlink()
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install -e .[dev]): no plot", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = [("p50_ms", "p50 ms a query", True), ("recall_at_10", "recall@10 vs exact", False),
               ("build_s", "build s (embedding included)", True), ("peak_rss_mib", "peak RSS MiB", True)]
    figure, axes = plt.subplots(2, 2, figsize=(10, 7))
    for axis, (key, title, logarithmic) in zip(axes.ravel(), figures, strict=True):
        for index_type in dict.fromkeys(row["type"] for row in rows):
            own = [row for row in rows if row["type"] == index_type]
            axis.plot([r["size"] for r in own], [r[key] for r in own], marker="o", label=index_type)
        axis.set_xscale("log")
        if logarithmic:
            axis.set_yscale("log")
        axis.set_title(title)
        axis.set_xlabel("questions")
        axis.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


TARGET_SIZE = 1_000_000
TARGET_RECALL = 0.95
TARGET_P50_MS = {"hnsw": 2.0, "ivfpq": 5.0}
TARGET_RSS_BEYOND_FAISS_MIB = 1536


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The scale targets, each with what the rows at TARGET_SIZE measured and whether it is met:
    recall@10 and p50 of the type ``auto`` picks there, and every type's peak RSS beyond its
    FAISS index while indexing."""
    at_size = [row for row in rows if row["size"] == TARGET_SIZE]
    checks = []
    for row in at_size:
        beyond = row["peak_rss_mib"] - row["faiss_mib"]
        checks.append((f"peak RSS beyond the FAISS index, {row['type']} at {TARGET_SIZE:,}",
                       f"{beyond:,.0f} MiB (<= {TARGET_RSS_BEYOND_FAISS_MIB:,})",
                       "met" if beyond <= TARGET_RSS_BEYOND_FAISS_MIB else "**missed**"))
        if row["type"] == row["auto_picks"] and row["type"] in TARGET_P50_MS:
            limit = TARGET_P50_MS[row["type"]]
            checks.append((f"recall@10 of auto's pick ({row['type']}) at {TARGET_SIZE:,}",
                           f"{row['recall_at_10']:.3f} (>= {TARGET_RECALL})",
                           "met" if row["recall_at_10"] >= TARGET_RECALL else "**missed**"))
            checks.append((f"p50 of auto's pick ({row['type']}) at {TARGET_SIZE:,}",
                           f"{row['p50_ms']:.2f} ms (<= {limit})",
                           "met" if row["p50_ms"] <= limit else "**missed**"))
    return checks


def report(results: Path) -> None:
    """The section of docs/benchmarks.md (and the plot) from a run's scale.json."""
    run = json.loads(results.read_text())
    rows = run["rows"]
    plotted = plot(rows, results.parent / "scale.png")
    table = markdown_table(
        ["questions", "type", "auto picks", "parameters", "build s", "of which embedding s",
         "peak RSS MiB", "FAISS MiB", "index dir MiB", "recall@10", "p50 ms", "p99 ms"],
        [(f"{r['size']:,}", r["type"], r["auto_picks"], r["parameters"] or "", f"{r['build_s']:,.1f}",
          f"{r['embed_s']:,.1f}", f"{r['peak_rss_mib']:,.0f}", f"{r['faiss_mib']:,.1f}",
          f"{r['directory_mib']:,.0f}", f"{r['recall_at_10']:.3f}", f"{r['p50_ms']:.2f}",
          f"{r['p99_ms']:.2f}") for r in rows])
    checks = targets(rows)
    figure = (f"\n\n![scale]({os.path.relpath(results.parent / 'scale.png', ROOT / 'docs')})"
              if plotted else "")
    body = (f"Model `{run['model']}`; distinct conversation texts, {run['queries']:,} held out as "
            f"queries; SQLite store; index runs on {run['cpus']} cores; latency of one query at a "
            "time after encoding, on one thread, with the search settings the build recorded; "
            "recall@10 against the flat (exact) index.\n\n" + table
            + ("\n\n" + markdown_table(["target", "measured", ""], checks) if checks else "") + figure)
    sizes = " ".join(str(size) for size in dict.fromkeys(row["size"] for row in rows))
    measured = run.get("measured_utc")
    write_section("scale", "Scale: index types by collection size",
                  f"python -m bench.scale --model {run['model']} --sizes {sizes}", body,
                  measured=datetime.fromisoformat(measured) if measured
                  else datetime.fromtimestamp(results.stat().st_mtime, UTC))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/fast")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=TYPES)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "scale")
    parser.add_argument("--report", action="store_true",
                        help="only rewrite the section and plot from --out's scale.json")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.source, args.model, args.types[0])
        return
    if args.report:
        report(args.out / "scale.json")
        return
    from askalike.core.loader import load_encoder

    corpus, query_texts = split_texts(max(args.sizes))
    queries = load_encoder(args.model).encode(query_texts)
    rows = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        for size in sorted(args.sizes):
            rows += run_size(size, corpus, queries, args, Path(scratch))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(
        {"model": args.model, "queries": QUERIES, "k": K, "search_threads": 1, "cpus": os.cpu_count(),
         "measured_utc": datetime.now(UTC).isoformat(timespec="minutes"), "rows": rows}, indent=2) + "\n")
    report(args.out / "scale.json")


if __name__ == "__main__":
    main()
