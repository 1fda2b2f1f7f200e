"""The GPU paths on a lent GPU machine, beside the CPU paths on the same machine (issue 53):
embedding rate and agreement, an index run, grouping 1,000,000 vectors, a tune and a train run on
CUDA to the end with their models answering on the CPU.

Three steps, since the GPU machine reaches no data and holds nothing between calls:

    python -m bench.gpu prepare .device/inputs              # here: the texts and pairs it reads
    python -m bench.gpu run .device/inputs --out results.json   # there, from the bare copy
    python -m bench.gpu report results.json                 # here: docs/benchmarks.md

``run`` does each part it can: the index run needs FAISS and SQLAlchemy (carried as wheels where
the machine lacks them); a part that fails is reported as failed and the others go on.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from askalike.core.data_dir import resolve_data_dir
from bench.harness import machine, markdown_table, real_questions, write_section
from bench.tune_speed import write_pairs

QUESTIONS = "questions.txt.gz"
PAIRS = "pairs.csv"
DIALOGUES = "dialogues.tsv.gz"
CPU_SAMPLE = 4_000  # texts the CPU encoder embeds (it is ~30x slower)
CPU_QUERIES = 2_000  # queries the CPU answers exactly, to time it and compare


def prepare(directory: Path, questions: int, pairs: int, dialogues: int) -> None:
    """The inputs of ``run``, from the data directory: real questions, the labelled pairs that
    bench.tune_speed tunes on (topped up with STS Benchmark train pairs scored 4 or more, alike,
    or 1 or less, not alike), and task-dialogue pairs (SGD) to train a small transformer on."""
    from askalike.core.datasets import read_sts_benchmark, stsb_path
    from askalike.train.corpus import conversation_pairs

    directory.mkdir(parents=True, exist_ok=True)
    data_dir = resolve_data_dir()
    with gzip.open(directory / QUESTIONS, "wt", encoding="utf-8") as handle:
        handle.writelines(" ".join(text.split()) + "\n" for text in real_questions(questions, data_dir))
    count = write_pairs(data_dir, pairs, directory / PAIRS)
    clear = [pair for pair in read_sts_benchmark(stsb_path(data_dir, "train")) if not 1 < pair.score < 4]
    with open(directory / PAIRS, "a", newline="", encoding="utf-8") as handle:  # topped up from STSb
        csv.writer(handle).writerows([pair.sentence1, pair.sentence2, int(pair.score >= 4)]
                                     for pair in clear[: max(pairs - count, 0)])
    count = max(count, pairs)
    with gzip.open(directory / DIALOGUES, "wt", encoding="utf-8", newline="") as handle:
        csv.writer(handle, delimiter="\t").writerows(conversation_pairs(data_dir, "sgd")[0][:dialogues])
    print(f"{directory}: {questions:,} questions, {count:,} pairs, {dialogues:,} dialogue pairs")


def _timed(work: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def _cosines(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    cosines = np.sum(a * b, axis=1)
    return {"min_cosine": float(cosines.min()), "mean_cosine": float(cosines.mean())}


def embedding(model: str, texts: list[str], gpu: Any) -> dict[str, Any]:
    """Texts a second: ONNX Runtime on the CPU (all cores, and 2 threads) on a sample, torch on
    the GPU on all of them (after a warm-up batch); their vectors' agreement on the sample."""
    from askalike.core.loader import load_encoder
    from askalike.train.torch_encoder import TorchEncoder

    sample = texts[:CPU_SAMPLE]
    figures: dict[str, Any] = {"texts": len(texts), "cpu_sample": len(sample)}
    cpu_vectors, seconds = _timed(lambda: load_encoder(model).encode(sample))
    figures["cpu_all_cores_per_s"] = len(sample) / seconds
    two = sample[: CPU_SAMPLE // 4]
    figures["cpu_2_threads_per_s"] = len(two) / _timed(lambda: load_encoder(model, threads=2).encode(two))[1]
    encoder = TorchEncoder.of_model(model, gpu)
    encoder.encode(texts[:1024], batch_size=512)  # warm-up: kernels chosen, memory taken
    gpu_vectors, seconds = _timed(lambda: encoder.encode(texts, batch_size=512))
    figures["gpu_per_s"] = len(texts) / seconds
    return figures | _cosines(gpu_vectors[: len(sample)], cpu_vectors)


def index_run(model: str, texts: list[str], gpu: Any, work: Path) -> dict[str, Any]:
    """``askalike index`` of the texts with the torch encoder on the GPU (the index command's
    ``--device cuda``), timed whole; its stored vectors against ONNX Runtime's on a sample."""
    from askalike.core.loader import load_encoder
    from askalike.core.text import join_subject_body
    from askalike.indexer.build import IndexOptions, index_sources
    from askalike.indexer.directory import open_index
    from askalike.train.torch_encoder import TorchEncoder

    source = work / "questions.jsonl"
    source.write_text("".join(json.dumps({"id": f"q{i}", "subject": text}) + "\n"
                              for i, text in enumerate(texts)))
    options = IndexOptions(show_progress=False, encoder_loader=lambda spec: TorchEncoder.of_model(spec, gpu))
    report, seconds = _timed(lambda: index_sources(work / "index", [source], model, options=options))
    index = open_index(work / "index")
    try:
        stored = index.store.vectors_of(list(range(1, CPU_SAMPLE + 1)), index.manifest.encoder.dim)
        rows = sorted(stored)
        questions = index.store.fetch(rows)
        embedded = [join_subject_body(questions[row].subject, questions[row].body) for row in rows]
        expected = load_encoder(model).encode(embedded)
    finally:
        index.close()
    return {"questions": report.total, "embedded_per_s": report.questions_per_s,
            "embed_seconds": report.embed_seconds, "whole_run_seconds": seconds,
            "index_type": report.index_type} | _cosines(np.stack([stored[row] for row in rows]), expected)


def grouping(gpu: Any, count: int, dim: int = 384) -> dict[str, Any]:
    """Near-duplicate pairs among ``count`` unit vectors (a twentieth of them copies of others
    at cosine about 0.95), as ``duplicates`` finds them: each vector's 11 nearest by exact search
    on the GPU, the pairs at 0.9 or more scored and grouped around centres. The CPU's exact search
    (numpy, every core) answers a sample of queries, timed and compared."""
    from askalike.retrieval.collection_duplicates import Pair, candidate_pairs, centred_groups
    from askalike.train.gpu_search import ExactSearch

    generator = np.random.default_rng(53)
    planted = count // 20
    vectors = generator.standard_normal((count, dim), dtype=np.float32)
    originals = generator.choice(count - planted, planted, replace=False)
    noise = generator.standard_normal((planted, dim), dtype=np.float32)
    vectors[count - planted:] = vectors[originals] + 0.33 * noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(count, dtype=np.int64)
    figures: dict[str, Any] = {"vectors": count, "planted_pairs": planted}

    def group() -> list[list[int]]:
        search = ExactSearch(ids, vectors, gpu)
        chunks = ((ids[s:s + 8192], vectors[s:s + 8192]) for s in range(0, count, 8192))
        candidates, _ = candidate_pairs(chunks, search, 11, 0.9)
        pairs = [Pair(a, b, float(vectors[a] @ vectors[b])) for a, b in candidates]
        return sorted([centre, *members] for centre, members in centred_groups(
            [pair for pair in pairs if pair.cosine >= 0.9]))

    groups, figures["gpu_seconds"] = _timed(group)
    figures["groups"] = len(groups)
    figures["planted_found"] = sum(1 for g in groups if len(g) == 2 and g[1] >= count - planted)
    queries = vectors[count - CPU_QUERIES:]
    cpu_ids, seconds = _timed(lambda: _nearest_on_cpu(queries, vectors, 11))
    figures["cpu_queries_per_s"] = CPU_QUERIES / seconds
    figures["cpu_seconds_for_all"] = count / figures["cpu_queries_per_s"]
    _, gpu_ids = ExactSearch(ids, vectors, gpu).search(queries, 11)
    figures["same_neighbours"] = float(np.mean(gpu_ids == cpu_ids))
    return figures


def _nearest_on_cpu(queries: np.ndarray, vectors: np.ndarray, k: int) -> np.ndarray:
    """The ids of each query's ``k`` best inner products, best first, by numpy (BLAS on every
    core), 250 queries at a time."""
    found = []
    for start in range(0, len(queries), 250):
        scores = queries[start:start + 250] @ vectors.T
        best = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, best, axis=1), axis=1)
        found.append(np.take_along_axis(best, order, axis=1))
    return np.concatenate(found)


def tuning(model: str, pairs: Path, gpu: Any, work: Path) -> dict[str, Any]:
    """``askalike tune MODEL --pairs FILE --device cuda`` timed whole (reading, dev figures,
    training, saving, the ONNX export); the tuned model then answers on the CPU (ONNX Runtime)
    and on the GPU with the same vectors."""
    from askalike.core.devices import Device
    from askalike.core.loader import load_encoder
    from askalike.train.pair_tuning import TuneSettings, tune
    from askalike.train.torch_encoder import TorchEncoder

    figures: dict[str, Any] = {}
    for mixed in (True, False):  # bf16 autocast (the trainer's default on a GPU), then float32
        settings = TuneSettings(device=Device(gpu.type), mixed_precision=mixed)
        name = "tuned" if mixed else "tuned-float32"
        record, seconds = _timed(lambda name=name, settings=settings: tune(
            model, pairs, work / name, work / f"{name}.run", settings, show_progress=False))
        figures[name] = {"seconds": seconds, "steps": record["steps"],
                         "before": record["before"]["dev_score"], "after": record["after"]["dev_score"]}
    with open(pairs, newline="", encoding="utf-8") as handle:
        texts_a = [row["text_a"] for row in csv.DictReader(handle)]
    texts = texts_a[:500]
    on_cpu = load_encoder(work / "tuned").encode(texts)
    on_gpu = TorchEncoder.of_model(work / "tuned", gpu).encode(texts)
    return (figures["tuned"] | {"file_pairs": len(texts_a), "pairs": record["train_pairs"],
                                "float32": figures["tuned-float32"]}
            | _cosines(on_gpu, on_cpu))


def training(inputs: Path, gpu: Any, work: Path) -> dict[str, Any]:
    """A small transformer (the project's own kind, Yang et al.'s response objective) trained on
    the GPU from scratch for 300 steps on task dialogues, saved with its ONNX export, which then
    answers on the CPU as the GPU's torch model does."""
    from askalike.core.devices import Device
    from askalike.core.loader import load_encoder
    from askalike.train.config import parse_config
    from askalike.train.corpus import TrainingData
    from askalike.train.torch_encoder import TorchEncoder
    from askalike.train.trainer import Trainer

    with gzip.open(inputs / DIALOGUES, "rt", encoding="utf-8", newline="") as handle:
        pairs = [(row[0], row[1]) for row in csv.reader(handle, delimiter="\t")]
    config = parse_config({
        "name": "gpu-check", "seed": 13,
        "model": {"kind": "transformer", "vocabulary_size": 20000,
                  "encoder": {"hidden": 256, "layers": 3, "heads": 4, "filter_size": 1024, "max_length": 64}},
        "data": {"conversations": [], "qatar_living": []},
        "training": {"objective": "response", "steps": 300, "batch_size": 128, "learning_rate": 5e-4,
                     "eval_every": 10_000, "checkpoint_every": 10_000, "eval_pairs": 500}})
    data = TrainingData(pairs[:-500], pairs[-500:], [])
    trainer = Trainer(config, inputs, work / "train", data, dev_evaluation=lambda encoder: {},
                      device=Device(gpu.type))
    model, seconds = _timed(lambda: trainer.run(show_progress=False))
    texts = [first for first, _ in pairs[-500:]]
    on_cpu = load_encoder(work / "train" / "model").encode(texts)
    on_gpu = TorchEncoder.of_model(work / "train" / "model", gpu).encode(texts)
    trained = _cosines(model.encoder.encode(texts), on_cpu)  # the float32 module, before int8
    return {"seconds": seconds, "steps": trainer.state.step, "device": str(trainer.device),
            "response_p@1": model.metrics.get("response", {}).get("p@1"),
            "trained_module_min_cosine": trained["min_cosine"]} | _cosines(on_gpu, on_cpu)


def run(inputs: Path, model: str, out: Path, count: int, vectors: int, parts: list[str],
        device: str) -> None:
    """Each of ``parts`` on ``device`` (cuda; cpu only to try the script), its figures written to
    ``out`` as soon as it ends."""
    import torch

    from askalike.train.trained_model import export_once

    gpu = torch.device(device)
    results: dict[str, Any] = {"machine": machine(), "measured": datetime.now(UTC).isoformat(),
                               "torch": torch.__version__,
                               "gpu": torch.cuda.get_device_name(gpu) if gpu.type == "cuda" else device}
    with gzip.open(inputs / QUESTIONS, "rt", encoding="utf-8") as handle:
        texts = [line.rstrip("\n") for line in handle][:count]
    exported, results["export_seconds"] = _timed(lambda: export_once(model))
    results["exported_here"] = exported
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        steps: dict[str, Callable[[], dict[str, Any]]] = {
            "embedding": lambda: embedding(model, texts, gpu),
            "index": lambda: index_run(model, texts, gpu, work),
            "grouping": lambda: grouping(gpu, vectors),
            "tuning": lambda: tuning(model, inputs / PAIRS, gpu, work),
            "training": lambda: training(inputs, gpu, work)}
        for name in parts:
            print(f"-- {name}", flush=True)
            try:
                results[name] = steps[name]()
            except Exception:  # a part that fails is reported; the others still run
                results[name] = {"failed": traceback.format_exc(limit=8)}
            print(json.dumps(results[name], indent=1), flush=True)
            out.write_text(json.dumps(results, indent=1) + "\n")


PARTS = ("embedding", "index", "grouping", "tuning", "training")


def merged(results_files: list[Path]) -> tuple[dict[str, Any], list[str]]:
    """The results of one or more ``run``s (a part that ran in a later file replaces an earlier
    one's), and when each part kept was measured."""
    results: dict[str, Any] = {}
    measured: dict[str, str] = {}
    for path in results_files:
        run_results = json.loads(path.read_text())
        ran = [part for part in PARTS if "failed" not in run_results.get(part, {"failed": "not run"})]
        results |= {key: value for key, value in run_results.items() if key not in PARTS or key in ran}
        measured |= dict.fromkeys(ran, run_results["measured"][:16].replace("T", " ") + " UTC")
    when = [f"{', '.join(part for part in PARTS if measured.get(part) == time)}: {time}"
            for time in dict.fromkeys(measured.values())]
    return results, when


def report(results_files: list[Path]) -> None:
    """The section of docs/benchmarks.md from ``run``'s results."""
    results, when = merged(results_files)
    rows: list[list[str]] = []

    def add(what: str, gpu: str, cpu: str, agreement: str) -> None:
        rows.append([what, gpu, cpu, agreement])

    def failed(name: str) -> bool:
        part = results.get(name)
        if part is not None and "failed" not in part:
            return False
        reason = "not run" if part is None else part["failed"].strip().splitlines()[-1]
        add(name, f"failed: {reason}", "", "")
        return True

    if not failed("embedding"):
        e = results["embedding"]
        add(f"embedding {e['texts']:,} questions (tokenizing included)",
            f"{e['gpu_per_s']:,.0f} a second",
            f"{e['cpu_all_cores_per_s']:,.0f} a second (all cores), "
            f"{e['cpu_2_threads_per_s']:,.0f} (2 threads)",
            f"min cosine {e['min_cosine']:.7f} over {e['cpu_sample']:,}")
    if not failed("index"):
        i = results["index"]
        add(f"`index` of {i['questions']:,} questions, `--device cuda`",
            f"{i['embedded_per_s']:,.0f} embedded a second; whole run {i['whole_run_seconds']:.1f} s",
            "", f"stored vectors: min cosine {i['min_cosine']:.7f} to the CPU's")
    if not failed("grouping"):
        g = results["grouping"]
        add(f"near-duplicate pairs among {g['vectors']:,} vectors (11 nearest each, exact)",
            f"{g['gpu_seconds']:.1f} s ({g['groups']:,} groups; {g['planted_found']:,} of "
            f"{g['planted_pairs']:,} planted pairs)",
            f"{g['cpu_queries_per_s']:,.0f} queries a second: "
            f"{g['cpu_seconds_for_all'] / 60:,.0f} min for all",
            f"same 11 nearest: {g['same_neighbours']:.2%}")
    if not failed("tuning"):
        t = results["tuning"]
        f32 = t["float32"]
        pairs = f"{t['pairs']:,} alike pairs"
        if "file_pairs" in t:
            pairs += f" of {t['file_pairs']:,} labelled"
        add(f"`tune accurate` on {pairs}, export included",
            f"{t['seconds']:.1f} s, {t['steps']} steps (bf16 autocast; float32: {f32['seconds']:.1f} s, "
            f"{f32['steps']} steps); held-out score {t['before']:.4f} -> {t['after']:.4f} "
            f"(float32: {f32['after']:.4f})", "",
            f"tuned model, ONNX on the CPU vs torch on the GPU: min cosine {t['min_cosine']:.7f}")
    if not failed("training"):
        t = results["training"]
        add(f"`train` a 3-layer transformer, {t['steps']} steps on {t['device']}, export included",
            f"{t['seconds']:.1f} s; response P@1 {t['response_p@1']}", "",
            f"its ONNX export on the CPU vs torch on the GPU: min cosine {t['min_cosine']:.7f}; the "
            f"trained float32 module: {t['trained_module_min_cosine']:.7f}")
    notes = ["The near-duplicate row is what `duplicates` computes after reading the stored vectors "
             "(each vector's nearest by exact search, the pairs at 0.9 or more scored and joined into "
             "groups), on vectors in memory; the CPU's time for all is its rate on 2,000 queries."]
    tuned = results.get("tuning", {})
    if "after" in tuned and tuned["after"] <= tuned["before"]:
        notes.append("`tune` stops at the first epoch that does not raise the held-out score and keeps "
                     "the best weights: here the first epoch did not, so the base's were kept.")
    body = (f"On {results['gpu']} (torch {results['torch']}); the CPU figures are ONNX Runtime (numpy for "
            f"the exact search) on the same machine's cores. Measured by part: {'; '.join(when)}.\n\n"
            + markdown_table(["what", "GPU", "CPU, same machine", "same results?"], rows)
            + "\n\n" + " ".join(notes))
    write_section("gpu", "GPU machine (issue 53)", "python -m bench.gpu prepare DIR; python -m bench.gpu "
                  "run DIR --out results.json (on the GPU machine); python -m bench.gpu report results.json",
                  body, datetime.fromisoformat(results["measured"]), on=results["machine"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("prepare")
    made.add_argument("directory", type=Path)
    made.add_argument("--questions", type=int, default=50_000)
    made.add_argument("--pairs", type=int, default=1_500)
    made.add_argument("--dialogues", type=int, default=20_000)
    ran = commands.add_parser("run")
    ran.add_argument("inputs", type=Path)
    ran.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "results.json")
    ran.add_argument("--model", default="models/accurate")
    ran.add_argument("--questions", type=int, default=50_000)
    ran.add_argument("--vectors", type=int, default=1_000_000, help="vectors grouped")
    ran.add_argument("--device", default="cuda")
    ran.add_argument("--parts", nargs="+", default=["embedding", "index", "grouping", "tuning", "training"])
    reported = commands.add_parser("report")
    reported.add_argument("results", type=Path, nargs="+", help="one run's results, or several: "
                                                              "a later run's part replaces an earlier one's")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.directory, args.questions, args.pairs, args.dialogues)
    elif args.command == "run":
        run(args.inputs, args.model, args.out, args.questions, args.vectors, args.parts, args.device)
    else:
        report(args.results)


if __name__ == "__main__":
    main()
