"""The scale benchmark's peers, measured in the same run as askalike: sentence-transformers +
FAISS as a user would write it, and txtai's ``Embeddings``, on the same texts and queries, each
index type built by every system.

    .venv/bin/python -m bench.peer_scale [--size 100000] [--model models/fast] [--types flat hnsw]
                                         [--rounds 2] [--peer-python PYTHON]

The texts and queries are bench.scale's (distinct conversation texts, 1,000 held out as
queries). askalike builds each type as bench.scale does (``index_sources`` in a fresh process).
The sentence-transformers peer encodes with all-MiniLM-L6-v2 (``SentenceTransformer.encode`` at
its default batch size, normalised) and adds the vectors to ``IndexFlatIP`` and to
``IndexHNSWFlat`` with askalike's HNSW parameters (links, efConstruction, efSearch for the size:
``indexer.index_type_choice``), in one fresh process (one peak RSS for both). txtai (in its own virtual
environment, ``--peer-python``; bench/txtai_peer.py) builds each type in its faiss backend with
the same FAISS structure; it has no setting for HNSW's efConstruction or efSearch.

The same thread settings for every system (``bench.harness.thread_env``): builds at one thread a
core, latency at one thread (askalike and sentence-transformers: the FAISS search of one encoded
query at a time; txtai: its search of the text, query encoding included). The systems alternate,
round by round in an order that reverses (A B C, C B A, ...); each time is the best of the
rounds, peak RSS the largest, and the report gives the 1-minute load average when each build
started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from askalike.core.model_dir import PRETRAINED
from askalike.indexer.index_types import INDEX_TYPES
from bench.harness import (
    ROOT,
    alternated,
    describe_threads,
    load_average,
    markdown_table,
    peak_rss_mib,
    recall_at_k,
    run_child,
    write_section,
)
from bench.scale import K, build_in_child, latencies_ms, measure, split_texts

PEER_MODEL = "all-MiniLM-L6-v2"
PEER_SCRIPT = ROOT / "bench" / "txtai_peer.py"
TXTAI_COMPONENTS = {"flat": "IDMap,Flat", "hnsw": "IDMap,HNSW{links}"}
ASKALIKE, SENTENCE_TRANSFORMERS, TXTAI = "askalike", "sentence-transformers + FAISS", "txtai"
BUILD_THREADS = os.cpu_count() or 1  # every build: one thread a core
LATENCY_THREADS = 1  # every latency: one query at a time on one thread


def peer_model() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(PRETRAINED[PEER_MODEL]()), device="cpu")


def hnsw_parameters(size: int) -> dict[str, Any]:
    """askalike's HNSW parameters for ``size`` vectors (they do not depend on the dimension)."""
    return INDEX_TYPES["hnsw"].parameters(size, 0)


def build_sentence_transformers(source: Path, out: Path, types: list[str]) -> dict[str, Any]:
    """In a fresh process: embed, add to a flat and/or an HNSW index, write them."""
    started = time.perf_counter()
    texts = json.loads(source.read_text(encoding="utf-8"))
    vectors = peer_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    embedded = time.perf_counter() - started  # read, import, load and encode
    result: dict[str, Any] = {}
    for index_type in types:
        begun = time.perf_counter()
        if index_type == "flat":
            index = faiss.IndexFlatIP(vectors.shape[1])
        else:
            parameters = hnsw_parameters(len(texts))
            index = faiss.IndexHNSWFlat(vectors.shape[1], parameters["links"], faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = parameters["ef_construction"]
        index.add(vectors)
        faiss.write_index(index, str(out / f"{index_type}.faiss"))
        result[f"{index_type}_build_s"] = embedded + time.perf_counter() - begun
    return result | {"peak_rss_mib": peak_rss_mib()}


Exact = dict[str, np.ndarray | None]  # each model's exact answers (its flat index's), once known


def askalike_rows(args: argparse.Namespace, scratch: Path, queries: np.ndarray, exact: Exact
                  ) -> list[dict[str, Any]]:
    rows = []
    for index_type in args.types:
        load, index_dir = load_average(), scratch / f"askalike-{index_type}"
        built = build_in_child(scratch / "texts.jsonl", index_dir, args.model, index_type, BUILD_THREADS)
        measured = measure(index_dir, queries, exact[ASKALIKE])
        if index_type == "flat":
            exact[ASKALIKE] = measured["found"]
        rows.append({"type": index_type, "load": load, "build_s": built["build_s"],
                     "peak_rss_mib": built["peak_rss_mib"], **measured})
        shutil.rmtree(index_dir)
    return rows


def sentence_transformers_rows(args: argparse.Namespace, scratch: Path, queries: np.ndarray, exact: Exact
                               ) -> list[dict[str, Any]]:
    load = load_average()
    built = run_child("bench.peer_scale", ["--child", str(scratch / "texts.json"), "--out", str(scratch),
                                           "--types", *args.types],
                      SENTENCE_TRANSFORMERS, threads=BUILD_THREADS)
    rows = []
    for index_type in args.types:
        index = faiss.read_index(str(scratch / f"{index_type}.faiss"))
        if index_type == "hnsw":
            index.hnsw.efSearch = hnsw_parameters(args.size)["ef_search"]
        p50, p99, found = latencies_ms(index, queries)
        if index_type == "flat":
            exact[SENTENCE_TRANSFORMERS] = found
        rows.append({"type": index_type, "load": load, "build_s": built[f"{index_type}_build_s"],
                     "peak_rss_mib": built["peak_rss_mib"], "p50_ms": p50, "p99_ms": p99,
                     "recall_at_10": recall_at_k(found, exact[SENTENCE_TRANSFORMERS])})
    return rows


def txtai_rows(args: argparse.Namespace, scratch: Path, exact: Exact) -> list[dict[str, Any]]:
    rows = []
    for index_type in args.types:
        load, index_dir = load_average(), scratch / f"txtai-{index_type}"
        components = TXTAI_COMPONENTS[index_type].format(links=hnsw_parameters(args.size)["links"])
        built = run_child(str(PEER_SCRIPT), ["build", str(PRETRAINED[PEER_MODEL]()),
                                             str(scratch / "texts.json"), str(index_dir),
                                             "--components", components],
                          TXTAI, threads=BUILD_THREADS, python=args.peer_python)
        searched = run_child(str(PEER_SCRIPT), ["search", str(index_dir), str(scratch / "queries.json"),
                                                "--k", str(K)], TXTAI, threads=LATENCY_THREADS,
                             python=args.peer_python)
        truth = exact[SENTENCE_TRANSFORMERS]  # the same model's exact answers
        recall = None if truth is None else recall_at_k(np.array(searched["found"]), truth)
        rows.append({"type": index_type, "load": load, "build_s": built["build_s"],
                     "peak_rss_mib": built["peak_rss_mib"], "p50_ms": searched["p50_ms"],
                     "p99_ms": searched["p99_ms"], "recall_at_10": recall})
        shutil.rmtree(index_dir)
    return rows


def one_round(system: str, args: argparse.Namespace, scratch: Path, queries: dict[str, np.ndarray],
              exact: Exact) -> list[dict[str, Any]]:
    """Build every type with ``system`` and measure it: one row a type."""
    if system == ASKALIKE:
        rows = askalike_rows(args, scratch, queries[ASKALIKE], exact)
    elif system == SENTENCE_TRANSFORMERS:
        rows = sentence_transformers_rows(args, scratch, queries[SENTENCE_TRANSFORMERS], exact)
    else:
        rows = txtai_rows(args, scratch, exact)
    return [{"system": system, **row} for row in rows]


def best_of(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (system, type): the best time of its rounds, the largest peak RSS, the loads."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rounds:
        key = (row["system"], row["type"])
        if key not in merged:
            merged[key] = dict(row) | {"loads": [row["load"]]}
            continue
        best = merged[key]
        best["loads"].append(row["load"])
        for name in ("build_s", "p50_ms", "p99_ms"):
            best[name] = min(best[name], row[name])
        best["peak_rss_mib"] = max(best["peak_rss_mib"], row["peak_rss_mib"])
        if best.get("recall_at_10") is None:  # a txtai round before the exact answers were known
            best["recall_at_10"] = row.get("recall_at_10")
    return list(merged.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--model", default="models/fast", help="askalike's model")
    parser.add_argument("--types", nargs="+", default=["flat", "hnsw"], choices=["flat", "hnsw"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--peer-python", help="the interpreter of a virtual environment with txtai")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.types = ["flat", *[t for t in args.types if t != "flat"]]  # flat first: the exact answers
    if args.child:
        print(json.dumps(build_sentence_transformers(args.child, args.out, args.types)))
        return
    from askalike.core.loader import load_encoder

    corpus, query_texts = split_texts(args.size)
    corpus = corpus[: args.size]
    queries = {ASKALIKE: load_encoder(args.model).encode(query_texts),
               SENTENCE_TRANSFORMERS: peer_model().encode(query_texts, normalize_embeddings=True,
                                                          convert_to_numpy=True)}
    systems = [ASKALIKE, SENTENCE_TRANSFORMERS] + ([TXTAI] if args.peer_python else [])
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as folder:
        scratch = Path(folder)
        (scratch / "texts.jsonl").write_text(
            "".join(json.dumps({"id": n, "subject": t}) + "\n" for n, t in enumerate(corpus)),
            encoding="utf-8")
        (scratch / "texts.json").write_text(json.dumps(corpus), encoding="utf-8")
        (scratch / "queries.json").write_text(json.dumps(query_texts), encoding="utf-8")
        exact: Exact = {ASKALIKE: None, SENTENCE_TRANSFORMERS: None}
        for order in alternated(systems, args.rounds):
            for system in order:
                rows = one_round(system, args, scratch, queries, exact)
                print(json.dumps([{k: v for k, v in r.items() if k != "found"} for r in rows]), flush=True)
                rounds += rows
    # a section per size and model, so that a run at another size keeps the others
    write_section(f"scale-peer-{args.size}-{Path(args.model).name}",
                  f"Scale: askalike against sentence-transformers + FAISS and txtai "
                  f"({args.size:,} texts, {Path(args.model).name})",
                  f"python -m bench.peer_scale --size {args.size} --model {args.model} "
                  f"--types {' '.join(args.types)} --rounds {args.rounds}"
                  + (" --peer-python ~/.cache/askalike/txtai-venv/bin/python" if args.peer_python else ""),
                  report_body(args, best_of(rounds), len(query_texts), systems))


def report_body(args: argparse.Namespace, rows: list[dict[str, Any]], queries: int,
                systems: list[str]) -> str:
    ours = {row["type"]: row for row in rows if row["system"] == ASKALIKE}
    hnsw = hnsw_parameters(args.size)
    table = markdown_table(
        ["system", "type", "build s (embedding included)", "x askalike's build", "peak RSS MiB",
         "recall@10 vs own model's exact", "p50 ms", "p99 ms", "load avg 1 min"],
        [(f"askalike `{args.model}`" if row["system"] == ASKALIKE else f"{row['system']} {PEER_MODEL}",
          row["type"], f"{row['build_s']:,.1f}", f"{row['build_s'] / ours[row['type']]['build_s']:.1f}x",
          f"{row['peak_rss_mib']:,.0f}",
          "-" if row.get("recall_at_10") is None else f"{row['recall_at_10']:.3f}",
          f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}", ", ".join(f"{load:.2f}" for load in row["loads"]))
         for row in rows])
    txtai = ("txtai's `Embeddings` (faiss backend, `IDMap,Flat` and `IDMap,HNSW"
             f"{hnsw['links']}`; FAISS's default HNSW efConstruction 40 and efSearch 16, as txtai has no "
             "setting for them), its latency that of its search of the text, query encoding included, "
             "and its recall against the sentence-transformers flat index (the same model's exact "
             "answers)" if TXTAI in systems else "no txtai row (no `--peer-python`)")
    return (f"{args.size:,} distinct conversation texts and {queries:,} held-out queries (bench.scale's "
            f"texts). askalike encodes with `{args.model}`, the peers with {PEER_MODEL}, so the build "
            "ratio is mostly the encoders' speed; askalike's build includes its SQLite store and lexical "
            "index, each index type in its own fresh process; the sentence-transformers peer encodes "
            "once and adds to both of its indexes in one fresh process (one peak RSS for both; its "
            f"HNSW with askalike's parameters: {hnsw['links']} links, efConstruction "
            f"{hnsw['ef_construction']}, efSearch {hnsw['ef_search']}); {txtai}. Threads ({os.cpu_count()} "
            f"cores): every build under {describe_threads(BUILD_THREADS)}, every latency at one "
            f"thread ({describe_threads(LATENCY_THREADS)} for txtai's process, FAISS's OpenMP at 1 for "
            "the others), one query at a time. "
            f"{args.rounds} round(s), the systems in an order that reverses from round to round "
            f"({' | '.join(', '.join(order) for order in alternated(systems, args.rounds))}); each time "
            "is the best of its rounds, peak RSS the largest, and the last column the 1-minute load "
            "average when each round's build started.\n\n" + table)


if __name__ == "__main__":
    main()
