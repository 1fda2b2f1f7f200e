"""How good are the same-question judgements and the groups ``askalike duplicates`` finds? Scored
against the gold of the SemEval CQA subtask B splits, whose (original, related) question pairs
are judged PerfectMatch (the same question), Relevant or Irrelevant.

    .venv/bin/python -m bench.duplicates_quality [--model models/fast --model models/accurate]

Two tables for docs/results.md:

- **Pair judgements** (issue 50): each model's judge is fitted as ``askalike calibrate`` fits it
  (CQA train and dev 2016, ``retrieval.calibration.fit_on_cqa``), and on each split the pairs
  it calls the same question are scored against PerfectMatch: at its default (a match of 50%),
  at the match threshold of the best F1 on dev 2016 (applied unchanged to the tests), and beside
  them the cosine threshold the command used before (0.7); with the calibration error of the
  match (10 bins). Test 2017's gold is binary (PerfectMatch or Relevant, no 3-way labels):
  there the figures are against that gold and no calibration error is given.
- **Bounds**: what any cosine threshold could reach on each test split, the threshold picked on
  that split itself (so never a setting, only a ceiling for every judge that is a curve of the
  cosine): the best F1 of the pairs, and the most group recall at the precision issue 50 asks
  (90% on test 2016, 85% on test 2017).
- **Groups**: each split's questions (the originals and their related questions) are indexed on
  their own (cached under ~/.cache/askalike/bench-duplicates/cqa), the groups are found as the
  command finds them (``centred_groups`` over the pairs at the threshold), and a judged pair
  counts as found when both questions land in the same group; precision and recall are over the
  judged pairs against the split's binary gold (PerfectMatch or Relevant: a duplicate to find).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from askalike.core.data_dir import resolve_data_dir
from askalike.core.loader import load_encoder
from askalike.indexer.build import IndexOptions, index_sources
from askalike.indexer.directory import open_index
from askalike.retrieval.calibration import JudgedPair, cqa_pairs, fit_on_cqa, pair_cosines
from askalike.retrieval.collection_duplicates import Pair, centred_groups, similar_pairs
from askalike.retrieval.cqa_runs import CqaSplit, load_cqa_split
from askalike.retrieval.judgement import SAME_QUESTION, SameQuestionJudge, calibration_error, f1_at
from bench.harness import markdown_table

CACHE = Path.home() / ".cache" / "askalike" / "bench-duplicates" / "cqa"
SPLITS = ("dev2016", "test2016", "test2017")
GRID = [step / 100 for step in range(5, 100)]  # the match thresholds tried for the best F1 on dev
FORMER_COSINE = 0.7  # the cosine ``duplicates`` called near-duplicates before the judge
FLOOR = 0.3  # pairs are found once, down to this cosine
COSINE_GRID = [step / 200 for step in range(80, 198)]  # 0.40 to 0.985: the bounds' thresholds
WANTED_PRECISION = {"test2016": 0.90, "test2017": 0.85}  # issue 50's group targets


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
    """A split's pairs at a cosine of FLOOR or more and each row id's question id."""

    pairs: list[Pair]
    ids: dict[int, str]


def found_pairs(index_dir: Path) -> FoundPairs:
    opened = open_index(index_dir)
    try:
        pairs = similar_pairs(opened, FLOOR)
        ids = {row: external for row, _, external in opened.store.question_keys()}
    finally:
        opened.close()
    return FoundPairs(pairs, ids)


def score(split: CqaSplit, found: FoundPairs, min_cosine: float) -> Score:
    """The judged pairs whose questions share a group (the command's ``centred_groups`` of the
    pairs at ``min_cosine``)."""
    groups = [[centre, *members] for centre, members in
              centred_groups([pair for pair in found.pairs if pair.cosine >= min_cosine])]
    group_of = {found.ids[row]: n for n, group in enumerate(groups) for row in group}
    same = [item.orgq_id in group_of and group_of[item.orgq_id] == group_of.get(item.relq_id)
            for item in split.gold]
    hits = sum(item.label and found for item, found in zip(split.gold, same, strict=True))
    relevant = sum(item.label for item in split.gold)
    return Score(hits / sum(same) if any(same) else 0.0, hits / relevant if relevant else 0.0, sum(same),
                 len(groups), max(map(len, groups), default=0))


def _decision(probabilities: np.ndarray, same: np.ndarray, threshold: float) -> list[str]:
    called = probabilities >= threshold
    hits = int(np.sum(called & same))
    precision = f"{hits / called.sum():.1%}" if called.any() else "-"
    return [precision, f"{hits / same.sum():.1%}", f"{f1_at(probabilities, same, threshold):.3f}"]


def judgement_rows(model: str, judge: SameQuestionJudge, pairs: dict[str, list[JudgedPair]],
                   cosines: dict[str, np.ndarray]) -> list[list[object]]:
    """Per split: the F1 (with precision and recall) of the former cosine threshold, of the
    judge at 50% and at the match threshold best on dev 2016, and the calibration error."""
    matches = {name: np.asarray(judge.probability(values)) for name, values in cosines.items()}
    same = {name: np.array([pair.same for pair in rows]) for name, rows in pairs.items()}
    best = max(GRID, key=lambda t: (f1_at(matches["dev2016"], same["dev2016"], t), -t))
    rows = []
    for name in pairs:
        gold = "PerfectMatch" if name != "test2017" else "PerfectMatch or Relevant (binary gold)"
        error = "-" if name == "test2017" else f"{calibration_error(matches[name], same[name]):.3f}"
        for label, values, threshold in (
                (f"cosine {FORMER_COSINE} (before)", cosines[name], FORMER_COSINE),
                (f"match {SAME_QUESTION:.0%} (default)", matches[name], SAME_QUESTION),
                (f"match {best:.0%} (best F1 on dev 2016)", matches[name], best)):
            rows.append([model, name, gold, len(same[name]), int(same[name].sum()), label,
                         *_decision(values, same[name], threshold), error])
    return rows


def bound_row(model: str, split: CqaSplit, cosines: np.ndarray, same: np.ndarray,
              found: FoundPairs) -> list[object]:
    """The ceilings of a cosine threshold on ``split``, each picked on the split itself (over
    ``COSINE_GRID``)."""
    former = score(split, found, FORMER_COSINE)
    at = max(COSINE_GRID, key=lambda t: (f1_at(cosines, same, t), -t))  # ties: the lowest, as below
    best_f1 = f1_at(cosines, same, at)
    wanted = WANTED_PRECISION[split.name]
    precise = [(result, t) for result, t in ((score(split, found, t), t) for t in COSINE_GRID)
               if result.found and result.precision >= wanted]
    groups = "none"
    if precise:
        result, t = max(precise, key=lambda item: (item[0].recall, -item[1]))
        groups = f"{result.recall:.1%} (precision {result.precision:.1%}, cosine {t:.3f})"
    return [model, split.name, f"{best_f1:.3f} (cosine {at:.3f})",
            f"{f1_at(cosines, same, FORMER_COSINE):.3f}", f"{wanted:.0%}", groups,
            f"{former.recall:.1%} (precision {former.shown_precision})"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="repeatable [default: models/fast, models/accurate]")
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args()
    data_dir = resolve_data_dir(args.data_dir)
    splits = [load_cqa_split(data_dir, name) for name in SPLITS]
    pairs = {name: cqa_pairs(data_dir, name, frozenset({"PerfectMatch"} if name != "test2017"
                                                       else {"PerfectMatch", "Relevant"}))
             for name in SPLITS}
    judgements, rows, bounds = [], [], []
    for model in args.model or ["models/fast", "models/accurate"]:
        encoder = load_encoder(model)
        judge = fit_on_cqa(encoder, data_dir)
        cosines = {name: pair_cosines(encoder, rows) for name, rows in pairs.items()}
        judgements += judgement_rows(model, judge, pairs, cosines)
        found = {split.name: found_pairs(split_index(split, model)) for split in splits}
        bounds += [bound_row(model, split, np.asarray(cosines[split.name]),
                             np.array([pair.same for pair in pairs[split.name]]), found[split.name])
                   for split in splits[1:]]
        dev = splits[0]
        dev_f1 = {t: score(dev, found[dev.name], judge.cosine_for(t)).f1 for t in GRID}
        best = max(GRID, key=lambda t: (dev_f1[t], -t))
        for split in splits:
            base_rate = sum(item.label for item in split.gold) / len(split.gold)
            for label, threshold in (("default", SAME_QUESTION), ("best F1 on dev2016", best)):
                result = score(split, found[split.name], judge.cosine_for(threshold))
                rows.append([model, split.name, f"{threshold:.0%} ({label})", len(split.gold),
                             f"{base_rate:.1%}", result.found, result.shown_precision,
                             f"{result.recall:.1%}", f"{result.f1:.1%}", result.groups, result.largest])
    print(markdown_table(["model", "split", "gold: the same question", "pairs", "same", "called the same at",
                          "precision", "recall", "F1", "calibration error"], judgements), end="\n\n")
    print(markdown_table(["model", "split", "min match", "judged pairs", "gold duplicates",
                          "found", "precision", "recall", "F1", "groups", "largest"], rows), end="\n\n")
    print(markdown_table(["model", "split", "best pair F1 of any cosine threshold", "pair F1 at cosine 0.7",
                          "group precision wanted", "most group recall at that precision",
                          "group recall at cosine 0.7 (centred groups)"], bounds))

if __name__ == "__main__":
    main()
