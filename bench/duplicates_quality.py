"""How good are the groups ``askalike duplicates`` finds? Scored against the gold of the SemEval
CQA subtask B splits, whose (original, related) question pairs are judged PerfectMatch/Relevant
(a duplicate to find) or Irrelevant.

    .venv/bin/python -m bench.duplicates_quality [--model models/fast --model models/accurate]

Each split's questions (the originals and their related questions) are indexed on their own
(cached under ~/.cache/askalike/bench-duplicates/cqa), the collection's near-duplicate groups are
found as the command finds them (``retrieval.collection_duplicates``, 10 neighbours a question),
and a judged pair counts as found when both questions land in the same group. Precision and
recall are over the judged pairs only (unjudged pairs have no gold). The threshold is chosen on
dev 2016 (the best F1 of a 0.01 grid) and applied unchanged to the test splits, beside the
command's default (90%). Prints a markdown table for docs/results.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from bench.common import markdown_table
from core.data_dir import resolve_data_dir
from indexer.build import IndexOptions, index_sources
from indexer.directory import open_index
from retrieval.collection_duplicates import DEFAULT_MIN_MATCH, Pair, connected_groups, similar_pairs
from retrieval.cqa_runs import CqaSplit, load_cqa_split

CACHE = Path.home() / ".cache" / "askalike" / "bench-duplicates" / "cqa"
SPLITS = ("dev2016", "test2016", "test2017")
GRID = [step / 100 for step in range(30, 100)]  # the thresholds tried on dev
PRECISE = 0.9
FLOOR = GRID[0]  # pairs are found once, down to the lowest threshold tried


@dataclass(frozen=True)
class Score:
    precision: float
    recall: float
    found: int  # judged pairs predicted duplicates (both questions in one group)
    groups: int
    largest: int  # questions in the largest group

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


def external_pairs(index_dir: Path) -> tuple[list[Pair], dict[int, str]]:
    """Every pair of the split's questions at FLOOR or more, and each row id's question id."""
    opened = open_index(index_dir)
    try:
        pairs = similar_pairs(opened, FLOOR)
        ids = {row: external for row, _, external in opened.store.question_keys()}
    finally:
        opened.close()
    return pairs, ids


def score(split: CqaSplit, pairs: list[Pair], ids: dict[int, str], threshold: float) -> Score:
    groups = connected_groups(pairs, threshold)
    group_of = {ids[row]: n for n, group in enumerate(groups) for row in group}
    same = [item.orgq_id in group_of and group_of[item.orgq_id] == group_of.get(item.relq_id)
            for item in split.gold]
    hits = sum(item.label and found for item, found in zip(split.gold, same, strict=True))
    relevant = sum(item.label for item in split.gold)
    return Score(hits / sum(same) if any(same) else 0.0, hits / relevant if relevant else 0.0, sum(same),
                 len(groups), max(map(len, groups), default=0))


def thresholds_on_dev(dev: CqaSplit, pairs: list[Pair], ids: dict[int, str]) -> dict[str, float]:
    """The dev-chosen thresholds: the best F1, and the lowest whose precision reaches
    PRECISE (the most a cleanup can find while nine groupings in ten are right)."""
    scores = {threshold: score(dev, pairs, ids, threshold) for threshold in GRID}
    chosen = {"best F1 on dev2016": max(GRID, key=lambda t: (scores[t].f1, -t))}
    precise = [t for t in GRID if scores[t].found and scores[t].precision >= PRECISE]
    if precise:
        chosen[f"precision {PRECISE:.0%} on dev2016"] = precise[0]
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="repeatable [default: models/fast, models/accurate]")
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args()
    data_dir = resolve_data_dir(args.data_dir)
    splits = [load_cqa_split(data_dir, name) for name in SPLITS]
    rows = []
    for model in args.model or ["models/fast", "models/accurate"]:
        found = {split.name: external_pairs(split_index(split, model)) for split in splits}
        chosen = {"default": DEFAULT_MIN_MATCH, **thresholds_on_dev(splits[0], *found[splits[0].name])}
        for split in splits:
            base_rate = sum(item.label for item in split.gold) / len(split.gold)
            for label, threshold in chosen.items():
                result = score(split, *found[split.name], threshold)
                rows.append([model, split.name, f"{threshold:.0%} ({label})", len(split.gold),
                             f"{base_rate:.1%}", result.found, f"{result.precision:.1%}",
                             f"{result.recall:.1%}", f"{result.f1:.1%}", result.groups, result.largest])
    print(markdown_table(["model", "split", "min match", "judged pairs", "gold duplicates", "found",
                          "precision", "recall", "F1", "groups", "largest"], rows))

if __name__ == "__main__":
    main()
