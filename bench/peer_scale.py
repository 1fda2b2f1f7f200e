"""The scale benchmark's peer: sentence-transformers + FAISS as a user would write it, on the
same texts and queries as one of bench.scale's sizes, side by side with askalike's rows.

    .venv/bin/python -m bench.peer_scale [--size 100000] [--txtai]

The peer encodes the texts with all-MiniLM-L6-v2 (``SentenceTransformer.encode`` at its default
batch size, normalised) and adds them to ``IndexFlatIP`` and to ``IndexHNSWFlat(dim, 32)`` at
FAISS's defaults, in one fresh process whose peak RSS is reported (one figure for both, as the
process holds both). askalike's figures are read from docs/scale/scale.json (run bench.scale
first); its queries are held out of its largest size, as bench.scale holds them out.
``--txtai`` adds txtai's ``Embeddings`` on the same model (``pip install txtai``), if it imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bench.common import ROOT, markdown_table, peak_rss_mib, recall_at_k, run_child, write_section
from bench.scale import K, latencies_ms, split_texts
from core.model_dir import PRETRAINED

PEER_MODEL = "all-MiniLM-L6-v2"
HNSW_LINKS = 32


def peer_model() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(PRETRAINED[PEER_MODEL]()), device="cpu")


def build_peer(source: Path, out: Path) -> dict[str, Any]:
    """In a fresh process: embed, add to a flat and an HNSW index, write both."""
    started = time.perf_counter()
    texts = [json.loads(line)["text"] for line in source.read_text(encoding="utf-8").splitlines()]
    vectors = peer_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    embedded = time.perf_counter()  # read, import, load and encode
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    faiss.write_index(flat, str(out / "flat.faiss"))
    flat_done = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(vectors.shape[1], HNSW_LINKS, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(vectors)
    faiss.write_index(hnsw, str(out / "hnsw.faiss"))
    return {"flat_build_s": flat_done - started,
            "hnsw_build_s": (time.perf_counter() - flat_done) + (embedded - started),
            "peak_rss_mib": peak_rss_mib()}


def build_txtai(source: Path, out: Path) -> dict[str, Any]:
    """In a fresh process: txtai's Embeddings on the same model, its own defaults otherwise."""
    from txtai import Embeddings

    started = time.perf_counter()
    texts = [json.loads(line)["text"] for line in source.read_text(encoding="utf-8").splitlines()]
    embeddings = Embeddings(path=str(PRETRAINED[PEER_MODEL]()), backend="faiss")
    embeddings.index(texts)
    embeddings.save(str(out / "txtai"))
    return {"build_s": time.perf_counter() - started,
            "peak_rss_mib": peak_rss_mib()}


CHILDREN = {"peer": build_peer, "txtai": build_txtai}


def in_child(which: str, source: Path, out: Path) -> dict[str, Any]:
    return run_child("bench.peer_scale", ["--child", which, "--source", str(source), "--out", str(out)],
                     which)


def measured_row(system: str, build_s: float, peak_rss_mib: float, index: faiss.Index | None,
                 queries: np.ndarray | None, exact: np.ndarray | None) -> dict[str, Any]:
    row: dict[str, Any] = {"system": system, "build_s": build_s, "peak_rss_mib": peak_rss_mib}
    if index is not None and queries is not None:
        p50, p99, found = latencies_ms(index, queries)
        row |= {"p50_ms": p50, "p99_ms": p99, "found": found,
                "recall_at_10": 1.0 if exact is None else recall_at_k(found, exact)}
    return row


def txtai_row(source: Path, out: Path, query_texts: list[str]) -> dict[str, Any] | None:
    try:
        import txtai  # noqa: F401
    except ImportError:
        print("txtai does not import (pip install txtai): no txtai row", file=sys.stderr)
        return None
    from txtai import Embeddings

    built = in_child("txtai", source, out)
    embeddings = Embeddings()
    embeddings.load(str(out / "txtai"))
    embeddings.search(query_texts[0], K)  # warm-up
    times = []
    for text in query_texts:  # txtai's search takes text: its latency includes encoding the query
        started = time.perf_counter()
        embeddings.search(text, K)
        times.append((time.perf_counter() - started) * 1000)
    return {"system": "txtai Embeddings (query encoding included)", "build_s": built["build_s"],
            "peak_rss_mib": built["peak_rss_mib"], "p50_ms": float(np.percentile(times, 50)),
            "p99_ms": float(np.percentile(times, 99))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--scale-json", type=Path, default=ROOT / "docs" / "scale" / "scale.json")
    parser.add_argument("--txtai", action="store_true")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.source, args.out)))
        return
    scale = json.loads(args.scale_json.read_text())
    ours = [row for row in scale["rows"] if row["size"] == args.size]
    if not ours:
        raise SystemExit(f"{args.scale_json} has no rows of {args.size:,} texts: run bench.scale first")
    total = max(row["size"] for row in scale["rows"])  # bench.scale held its queries out of this
    corpus, query_texts = split_texts(total)
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        out, source = Path(scratch), Path(scratch) / "texts.jsonl"
        source.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus[: args.size]),
                          encoding="utf-8")
        built = in_child("peer", source, out)
        queries = peer_model().encode(query_texts, normalize_embeddings=True, convert_to_numpy=True)
        flat = measured_row(f"sentence-transformers {PEER_MODEL} + IndexFlatIP", built["flat_build_s"],
                            built["peak_rss_mib"], faiss.read_index(str(out / "flat.faiss")), queries, None)
        hnsw = measured_row(f"sentence-transformers {PEER_MODEL} + IndexHNSWFlat({HNSW_LINKS})",
                            built["hnsw_build_s"], built["peak_rss_mib"],
                            faiss.read_index(str(out / "hnsw.faiss")), queries, flat["found"])
        peers = [flat, hnsw]
        if args.txtai and (row := txtai_row(source, out, query_texts)) is not None:
            peers.append(row)
    by_type = {row["type"]: row for row in ours}
    pairs = [(by_type.get("flat"), flat), (by_type.get("hnsw"), hnsw)]
    lines = []
    for mine, peer in pairs:
        if mine is not None:
            lines.append((f"askalike `{scale['model']}` {mine['type']}",
                          mine["build_s"], mine["peak_rss_mib"], mine["recall_at_10"], mine["p50_ms"],
                          mine["p99_ms"], f"{peer['build_s'] / mine['build_s']:.1f}x",
                          f"{peer['p50_ms'] / mine['p50_ms']:.1f}x"))
    lines += [(row["system"], row["build_s"], row["peak_rss_mib"], row.get("recall_at_10"),
               row.get("p50_ms"), row.get("p99_ms"), "1.0x", "1.0x") for row in peers]
    table = markdown_table(
        ["system", "build s (embedding included)", "peak RSS MiB", "recall@10 vs own exact", "p50 ms",
         "p99 ms", "peer build time / askalike's", "peer p50 / askalike's"],
        [(name, f"{build:,.1f}", f"{rss:,.0f}", "-" if recall is None else f"{recall:.3f}",
          "-" if p50 is None else f"{p50:.2f}", "-" if p99 is None else f"{p99:.2f}", r1, r2)
         for name, build, rss, recall, p50, p99, r1, r2 in lines])
    body = (f"The same {args.size:,} texts and {len(query_texts):,} queries as bench.scale's "
            f"{args.size:,} rows (held out of {total:,}). askalike's rows are bench.scale's, "
            f"from its run recorded in `{args.scale_json.relative_to(ROOT)}` on this machine "
            "(SQLite store and lexical index included in its build, each index type in its own "
            f"process); askalike encodes with `{scale['model']}`, the peer with {PEER_MODEL}, so "
            "the build ratio is mostly the encoders' speed. The peer's build is encoding plus FAISS "
            "add, both indexes in one fresh process (one peak RSS for both). Latency: one query at "
            "a time after encoding, one thread (txtai: its search of the text, encoding included, "
            "at its own threads). Ratios are the peer's figure over askalike's on the same index "
            "kind.\n\n" + table)
    write_section("scale-peer", "Scale: askalike against sentence-transformers + FAISS",
                  f"python -m bench.peer_scale --size {args.size}"
                  + (" --txtai" if args.txtai else ""), body)


if __name__ == "__main__":
    main()
