"""Scale of ``askalike duplicates``: the near-duplicate groups of 100,000 questions, through the
index's nearest neighbours (never all pairs), on this machine's cores.

    .venv/bin/python -m bench.duplicates_scale [--model models/fast] [--size 100000] [--types flat hnsw]

The questions are distinct conversation texts (``bench.harness.conversation_texts``), dated one
after the other over 2024 so that ``--since`` can take the newest 1% (a moderator's daily run).
Each index type's index is built once by ``index_sources`` and cached under
~/.cache/askalike/bench-duplicates (building is not timed: ``bench.index_build`` measures it).
Timed: ``duplicate_groups`` at the default match (the model's judge at 50%), as the command runs
it (reading the stored vectors, the k-NN search, deeper where all neighbours are the same
question, grouping), over all questions and with ``--since`` (whose partners' neighbours are
looked at too, so that their groups come whole). An
approximate index's grouped questions are compared with the flat (exact) index's. Writes a section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from askalike.indexer.build import IndexOptions, index_sources
from askalike.indexer.directory import open_index
from askalike.retrieval.collection_duplicates import DEFAULT_NEIGHBOURS, duplicate_groups, questions_to_check
from askalike.retrieval.judgement import SAME_QUESTION, model_judge
from bench.harness import conversation_texts, markdown_table, write_section

CACHE = Path.home() / ".cache" / "askalike" / "bench-duplicates"
FIRST_DAY = datetime(2024, 1, 1, tzinfo=UTC)
NEW_SHARE = 0.01  # the newest questions a --since run looks at


def date_of(position: int, size: int) -> str:
    return f"{FIRST_DAY + timedelta(days=366 * position / size):%Y-%m-%dT%H:%M:%S}"


def built_index(size: int, model: str, index_type: str) -> Path:
    """The cached index of ``size`` dated texts, built on the first run."""
    directory = CACHE / f"scale-{Path(model).name}-{size}"
    source = directory / "questions.jsonl"
    if not source.exists():
        directory.mkdir(parents=True, exist_ok=True)
        records = ({"id": f"t{i}", "subject": text, "body": "", "date": date_of(i, size)}
                   for i, text in enumerate(conversation_texts(size)))
        source.write_text("".join(json.dumps(record) + "\n" for record in records))
    index_dir = directory / index_type
    index_sources(index_dir, [source], model,
                  options=IndexOptions(index_type=index_type, show_progress=False))
    return index_dir


def measure(index_dir: Path, model: str, since: str | None) -> dict[str, Any]:
    opened = open_index(index_dir)
    try:
        checked = questions_to_check(opened, since)
        started = time.perf_counter()
        groups = duplicate_groups(opened, model_judge(model), SAME_QUESTION, since)
        seconds = time.perf_counter() - started
    finally:
        opened.close()
    grouped = {member.question.external_id for group in groups for member in group.members}
    return {"seconds": seconds, "checked": opened.faiss.ntotal if checked is None else len(checked),
            "groups": len(groups), "grouped": grouped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/fast")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--types", nargs="+", default=["flat", "hnsw"])
    args = parser.parse_args()
    since = date_of(int(args.size * (1 - NEW_SHARE)), args.size)
    rows, exact = [], {}
    for index_type in args.types:
        index_dir = built_index(args.size, args.model, index_type)
        for label, start in (("all", None), (f"--since (newest {NEW_SHARE:.0%})", since)):
            result = measure(index_dir, args.model, start)
            if index_type == "flat":
                exact[label] = result["grouped"]
            recall = (f"{len(result['grouped'] & exact[label]) / len(exact[label]):.3f}"
                      if exact.get(label) else "")
            rows.append([f"{args.size:,}", index_type, label, f"{result['checked']:,}",
                         f"{result['seconds']:.2f}", f"{result['checked'] / result['seconds']:,.0f}",
                         f"{result['groups']:,}", f"{len(result['grouped']):,}", recall])
            print(rows[-1], flush=True)
    load = os.getloadavg()
    body = (f"Model `{args.model}`; distinct conversation texts; {os.cpu_count()} cores (load average "
            f"at the end: {load[0]:.1f} over 1 min, {load[2]:.1f} over 15 min: other jobs share them); "
            f"default --min-match ({SAME_QUESTION:.0%}: cosine "
            f"{model_judge(args.model).cosine_for(SAME_QUESTION):.3f}), "
            f"{DEFAULT_NEIGHBOURS} neighbours a question first; "
            "the time of `duplicate_groups` (read the stored vectors, k-NN search, grouping), the "
            "index built before. Recall: the share of the questions grouped through the flat (exact) index "
            "that this index groups too.\n\n"
            + markdown_table(["questions", "type", "run", "checked", "seconds", "questions/s", "groups",
                              "questions in groups", "recall"], rows))
    write_section("duplicates-scale", "Near-duplicate groups of a whole collection (issue 41)",
                  f"python -m bench.duplicates_scale --model {args.model} --size {args.size} "
                  f"--types {' '.join(args.types)}", body)


if __name__ == "__main__":
    main()
