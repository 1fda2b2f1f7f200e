"""Issue 43: ``askalike tune`` on domains no shipped model trained on. Each domain's fixed tune
part (``core.ood_evaluation``: alike and not-alike pairs, the in-between ones left out) is
written as a pair file; each base model is tuned on it with the command's defaults; the tuned
models and the untuned bases and peers are scored on the test parts (exported encoders, the ones
queries run). Tuned models go under $ASKALIKE_CACHE/domain-tuning (kept: a rerun only scores).

    python -m bench.experiments.domain_tuning [--base models/accurate --base models/fast] [--peer ...]
        [--learning-rate LR] [--score-share S] [--score-loss ranking|regression] [--epochs N]
        [--seed N] [--labels-only] [--teacher MODEL|tuned]

``--labels-only`` writes the labelled pairs alone, without the score column (``tune`` before
graded pairs); ``--teacher`` is distilled into a DAN base (``tuned``: the domain's
``models/accurate`` tuned with the defaults, which a run with the defaults leaves in the work
directory); settings other than the defaults name the tuned models' directories.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import time
from pathlib import Path

from askalike.core.data_dir import resolve_data_dir
from askalike.core.loader import load_encoder
from askalike.core.model_dir import DEFAULT_MODEL, cache_dir, read_model_config, weights_fingerprint
from askalike.core.ood_evaluation import OOD_DOMAINS, PARTS, CachedEncoder, domain_part, evaluate_pairs
from askalike.train.collection_adaptation import adapt_to_collection
from askalike.train.pair_tuning import TuneSettings, score_loss, tune
from askalike.train.trained_model import export_once

WORK = cache_dir() / "domain-tuning"


def write_tune_pairs(data_dir: Path, domain: str, path: Path, scores: bool = True) -> Path:
    """The domain's tune part as ``text_a,text_b,label,score`` rows (every pair with its gold
    score, 0-1; the in-between ones without a label), or without ``scores`` as
    ``text_a,text_b,label`` rows of the labelled pairs only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text_a", "text_b", "label"] + (["score"] if scores else []))
        for pair in domain_part(data_dir, domain, "tune"):
            label = "" if pair.label is None else pair.label
            if scores:
                writer.writerow([pair.sentence1, pair.sentence2, label, f"{pair.score:.4f}"])
            elif pair.label is not None:
                writer.writerow([pair.sentence1, pair.sentence2, label])
    return path


def adapted(base: str, data_dir: Path, domain: str) -> Path:
    """``tune BASE --collection``'s model for the domain's texts (both parts: no labels)."""
    out = WORK / f"{Path(base).name}-{domain}-collection"
    if not (out / "metrics.json").is_file():
        texts = sorted({t for part in PARTS for p in domain_part(data_dir, domain, part)
                        for t in (p.sentence1, p.sentence2)})
        adapt_to_collection(base, texts, out, DEFAULT_MODEL, cache_dir() / "collection-teacher")
    return out


def test_figures(model: str, data_dir: Path, domain: str) -> dict:
    export_once(model)
    key = f"{model}:{weights_fingerprint(model)}:query"  # as `askalike eval domains` keys it
    encoder = CachedEncoder(load_encoder(model), cache_dir() / "ood", key)
    return evaluate_pairs(encoder, domain_part(data_dir, domain, "test"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", action="append", help="models to tune (default: both shipped)")
    parser.add_argument("--peer", action="append", help="untuned peers to score (default: "
                        "pretrained:all-MiniLM-L6-v2, pretrained:all-mpnet-base-v2)")
    parser.add_argument("--domain", action="append", choices=list(OOD_DOMAINS))
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--score-share", type=float)
    parser.add_argument("--score-loss", choices=["regression", "ranking"], help="default: by the base's kind")
    parser.add_argument("--epochs", type=int, default=TuneSettings.epochs)
    parser.add_argument("--seed", type=int, default=TuneSettings.seed)
    parser.add_argument("--labels-only", action="store_true", help="no score column")
    parser.add_argument("--teacher", help="distilled into a DAN base: a model, or `tuned`")
    args = parser.parse_args()
    settings = TuneSettings(epochs=args.epochs, learning_rate=args.learning_rate,
                            score_share=args.score_share, score_loss=args.score_loss, seed=args.seed)
    changed = {"lr": args.learning_rate, "share": args.score_share,
               "epochs": args.epochs if args.epochs != TuneSettings.epochs else None,
               "seed": args.seed if args.seed != TuneSettings.seed else None}
    variant = "".join(f"-{name}{value:g}" for name, value in changed.items() if value is not None)
    labels = "-labels" if args.labels_only else ""
    variant += f"-{args.score_loss}" if args.score_loss else ""
    variant += labels + (f"-teacher-{Path(args.teacher).name}" if args.teacher else "")
    data_dir = resolve_data_dir()
    bases = args.base or ["models/accurate", "models/fast"]
    peers = args.peer or ["pretrained:all-MiniLM-L6-v2", "pretrained:all-mpnet-base-v2"]
    rows = []
    for domain in args.domain or list(OOD_DOMAINS):
        pairs = write_tune_pairs(data_dir, domain, WORK / f"{domain}-tune-pairs{labels}.csv",
                                 scores=not args.labels_only)
        for model in peers + bases:
            rows.append({"domain": domain, "model": model, "tuned": False,
                         **test_figures(model, data_dir, domain)})
        for base in bases:
            out = WORK / f"{Path(base).name}-{domain}{variant}"
            record = {}
            if not (out / "metrics.json").is_file():
                started = time.perf_counter()
                teacher = None
                if args.teacher and read_model_config(Path(base))["kind"] == "dan":
                    teacher = str(WORK / f"accurate-{domain}") if args.teacher == "tuned" else args.teacher
                record = tune(base, pairs, out, WORK / f"{out.name}.run",
                              dataclasses.replace(settings, teacher=teacher), resume=True)
                record["seconds"] = round(time.perf_counter() - started, 1)
                (WORK / f"{out.name}.record.json").write_text(json.dumps(record, indent=2))
            held_out = json.loads((out / "metrics.json").read_text())["tune"]
            asked = score_loss(read_model_config(Path(base))["kind"], settings)
            kept = held_out.get("score_loss", "regression")  # runs before the ranking loss regressed
            if held_out["scored_pairs"] and kept != asked:
                raise SystemExit(f"{out} was tuned with scores by {kept}, not by {asked} as asked: "
                                 f"remove it (and {out.name}.run) to tune it again")
            print(json.dumps({"domain": domain, "model": out.name, "held_out_before": held_out["before"],
                              "held_out_after": held_out["after"], "steps": held_out["steps"]}), flush=True)
            rows.append({"domain": domain, "model": f"{base} tuned{variant}", "tuned": True,
                         **test_figures(str(out), data_dir, domain)})
            if read_model_config(Path(base))["kind"] == "dan":
                rows.append({"domain": domain, "model": f"{base} + collection words", "tuned": True,
                             **test_figures(str(adapted(base, data_dir, domain)), data_dir, domain)})
    for row in rows:
        print(json.dumps(row))
    print("| domain | model | pair ranking accuracy | Pearson r |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['domain']} | {row['model']} | {row['ranking_accuracy']:.4f} | {row['pearson']:.4f} |")


if __name__ == "__main__":
    main()
