"""How good are the groups ``askalike duplicates`` finds? Scored against the gold of the SemEval
CQA subtask B splits, whose (original, related) question pairs are judged PerfectMatch/Relevant
(a duplicate to find) or Irrelevant.

    .venv/bin/python -m bench.duplicates_quality [--model models/fast --model models/accurate]

Each split's questions (the originals and their related questions) are indexed on their own
(cached under ~/.cache/askalike/bench-duplicates/cqa), the collection's near-duplicate groups are
found as the command finds them (``retrieval.collection_duplicates``, 10 neighbours a question),
and a judged pair counts as found when both questions land in the same group. Precision and
recall are over the judged pairs only (unjudged pairs have no gold).

Prints two markdown tables for docs/results.md: dev 2016 at thresholds 50-95% (what the
command's default was chosen from), and every split at the default and at the threshold of the
best F1 on dev 2016 (a 0.01 grid from 30%, for each grouping; applied unchanged to the test
splits), for both of the command's groupings: the pairs joined (union-find,
``connected_groups``) and ``--strict`` (``centred_groups``: every member at least the threshold
alike to its group's centre).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import markdown_table
from core.data_dir import resolve_data_dir
from indexer.build import IndexOptions, index_sources
from indexer.directory import open_index
from retrieval.collection_duplicates import (
    DEFAULT_MIN_MATCH,
    Pair,
    centred_groups,
    connected_groups,
    similar_pairs,
)
from retrieval.cqa_runs import CqaSplit, load_cqa_split

CACHE = Path.home() / ".cache" / "askalike" / "bench-duplicates" / "cqa"
SPLITS = ("dev2016", "test2016", "test2017")
GRID = [step / 100 for step in range(30, 100)]  # the thresholds tried for the best F1 on dev
SWEEP = [step / 100 for step in range(50, 100, 5)]  # the dev table the default was chosen from
FLOOR = GRID[0]  # pairs are found once, down to the lowest threshold tried


@dataclass(frozen=True)
class Score:
    precision: float
    recall: float
    found: int  # judged pairs predicted duplicates (both questions in one group)
    groups: int
    largest: int  # questions in the largest group

    @property
    def shown_precision(self) -> str:
        """The precision as a percentage; a dash where nothing was found (no precision)."""
        return f"{self.precision:.1%}" if self.found else "-"

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def split_index(split: CqaSplit, model: str) -> Path:
    """The split's questions indexed with ``model`` (built once, then reused)."""
    directory = CACHE / Path(model).name / split.name
    source = directory / "questions.jsonl"
    directory.mkdir(parents=True, exist_ok=True)
    records: dict[str, dict] = {}
    for original in split.questions:
        records.setdefault(original.id, {"id": original.id, "subject": original.subject,
                                         "body": original.body})
        for related in original.related:
            records.setdefault(related.id, {"id": related.id, "subject": related.subject,
                                            "body": related.body, "date": related.date})
    source.write_text("".join(json.dumps(record) + "\n" for record in records.values()))
    index_sources(directory / "index", [source], model, options=IndexOptions(show_progress=False))
    return directory / "index"


@dataclass(frozen=True)
class FoundPairs:
    """A split's pairs at FLOOR or more, the vectors of their questions, each row id's question id."""

    pairs: list[Pair]
    vectors: dict[int, np.ndarray]
    ids: dict[int, str]


def found_pairs(index_dir: Path) -> FoundPairs:
    opened = open_index(index_dir)
    try:
        pairs = similar_pairs(opened, FLOOR)
        involved = sorted({i for pair in pairs for i in (pair.first, pair.second)})
        vectors = opened.store.vectors_of(involved, opened.manifest.encoder.dim)
        ids = {row: external for row, _, external in opened.store.question_keys()}
    finally:
        opened.close()
    return FoundPairs(pairs, vectors, ids)


def _pairs_joined(found: FoundPairs, threshold: float) -> list[list[int]]:
    return connected_groups(found.pairs, threshold)


def _centred(found: FoundPairs, threshold: float) -> list[list[int]]:
    return centred_groups(found.pairs, found.vectors, threshold)


# how the command groups pairs: joined (union-find), and with --strict
GROUPINGS: dict[str, Callable[[FoundPairs, float], list[list[int]]]] = {
    "joined": _pairs_joined, "--strict": _centred}


def score(split: CqaSplit, found: FoundPairs, threshold: float, grouping: str = "joined") -> Score:
    """The judged pairs whose questions share a group."""
    groups = GROUPINGS[grouping](found, threshold)
    group_of = {found.ids[row]: n for n, group in enumerate(groups) for row in group}
    same = [item.orgq_id in group_of and group_of[item.orgq_id] == group_of.get(item.relq_id)
            for item in split.gold]
    hits = sum(item.label and found for item, found in zip(split.gold, same, strict=True))
    relevant = sum(item.label for item in split.gold)
    return Score(hits / sum(same) if any(same) else 0.0, hits / relevant if relevant else 0.0, sum(same),
                 len(groups), max(map(len, groups), default=0))


def dev_sweep(model: str, dev: CqaSplit, found: FoundPairs) -> list[list[object]]:
    """Precision, recall and pairs found on dev 2016 at every SWEEP threshold (what the
    command's default was chosen from)."""
    rows = []
    for threshold in SWEEP:
        result = score(dev, found, threshold)
        rows.append([model, f"{threshold:.0%}", result.found, result.shown_precision,
                     f"{result.recall:.1%}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="repeatable [default: models/fast, models/accurate]")
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args()
    data_dir = resolve_data_dir(args.data_dir)
    splits = [load_cqa_split(data_dir, name) for name in SPLITS]
    sweep, rows = [], []
    for model in args.model or ["models/fast", "models/accurate"]:
        found = {split.name: found_pairs(split_index(split, model)) for split in splits}
        dev = splits[0]
        sweep += dev_sweep(model, dev, found[dev.name])
        for grouping in GROUPINGS:
            dev_f1 = {t: score(dev, found[dev.name], t, grouping).f1 for t in GRID}
            best = max(GRID, key=lambda t: (dev_f1[t], -t))
            for split in splits:
                base_rate = sum(item.label for item in split.gold) / len(split.gold)
                for label, threshold in (("default", DEFAULT_MIN_MATCH), ("best F1 on dev2016", best)):
                    result = score(split, found[split.name], threshold, grouping)
                    rows.append([model, grouping, split.name, f"{threshold:.0%} ({label})", len(split.gold),
                                 f"{base_rate:.1%}", result.found, result.shown_precision,
                                 f"{result.recall:.1%}", f"{result.f1:.1%}", result.groups, result.largest])
    print(markdown_table(["model", "min match", "found", "precision", "recall"], sweep), end="\n\n")
    print(markdown_table(["model", "grouping", "split", "min match", "judged pairs", "gold duplicates",
                          "found", "precision", "recall", "F1", "groups", "largest"], rows))


if __name__ == "__main__":
    main()
