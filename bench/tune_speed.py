"""How long ``askalike tune`` takes on 1,000 labelled pairs (issue 43: at most 5 minutes on 2
cores). The pairs are the first 1,000 labelled pairs of the out-of-domain tune parts (``sick``,
then ``sts-qa``); each base is tuned with the command's defaults, the whole run timed: reading,
the dev figures before, training, the dev figures after each epoch, saving and the ONNX export.

    python -m bench.tune_speed [--model models/accurate --model models/fast] [--pairs 1000]
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

from askalike.core.data_dir import resolve_data_dir
from askalike.core.ood_evaluation import OOD_DOMAINS, domain_part
from askalike.train.pair_tuning import TuneSettings, tune
from bench.harness import markdown_table, write_section


def write_pairs(data_dir: Path, count: int, path: Path) -> int:
    """The first ``count`` labelled pairs of the domains' tune parts as a pair file; how many."""
    pairs = [pair for domain in OOD_DOMAINS for pair in domain_part(data_dir, domain, "tune")
             if pair.label is not None][:count]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text_a", "text_b", "label"])
        writer.writerows([pair.sentence1, pair.sentence2, pair.label] for pair in pairs)
    return len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="bases (default: both shipped models)")
    parser.add_argument("--pairs", type=int, default=1000)
    args = parser.parse_args()
    models = args.model or ["models/accurate", "models/fast"]
    rows = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        count = write_pairs(resolve_data_dir(), args.pairs, work / "pairs.csv")
        for model in models:
            out = work / Path(model).name
            started = time.perf_counter()
            record = tune(model, work / "pairs.csv", out, work / f"{out.name}.run", TuneSettings(),
                          show_progress=False)
            seconds = time.perf_counter() - started
            rows.append([model, f"{count:,}", f"{record['train_pairs']:,}", f"{record['hard_negatives']:,}",
                         str(record["steps"]), "yes" if record["stopped_early"] else "no",
                         f"{seconds:.0f}", f"{seconds / 60:.1f}"])
    body = (f"`askalike tune MODEL --pairs FILE` with its defaults (at most 3 epochs, early stop) on "
            f"{count:,} labelled pairs of the out-of-domain tune parts (10% held out as dev); the whole run "
            f"timed. 1-minute "
            f"load average {load:.1f} when it started.\n\n"
            + markdown_table(["model", "pairs in the file", "alike pairs trained", "hard negatives", "steps",
                              "stopped early", "seconds", "minutes"], rows))
    write_section("tune-speed", "Tuning on 1,000 pairs (issue 43)",
                  f"python -m bench.tune_speed --pairs {args.pairs}", body)


if __name__ == "__main__":
    main()
