"""A lever for models/accurate (issue: ranking quality): hard negatives mined by BM25. Every CQA
train original question that has related questions labelled relevant is searched, with the
project's BM25, among the distinct texts of the train split's other questions (originals and
related questions of other originals); its best hits are written, best first, as the rows of a
TSV that a training config reads with ``[data] cqa_hard_negatives_from``. The original's own
related questions are left out: the thread's irrelevant ones are the other hard-negative lever.

    python -m askalike.train.bm25_negatives --out runs/bm25-negatives.tsv [--per-question 6]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from askalike.core.cqa_questions import OriginalQuestion, read_split_questions
from askalike.core.data_dir import DataError, resolve_data_dir
from askalike.core.datasets import HARD_NEGATIVES_HEADER
from askalike.core.files import write_text_atomically
from askalike.core.lexical import LexicalIndex


def one_line(text: str) -> str:
    """The text with its runs of whitespace (tabs and line breaks included) as single spaces."""
    return " ".join(text.split())


def mine_negatives(originals: Sequence[OriginalQuestion], per_question: int) -> dict[str, list[str]]:
    """Each labelled original's ``per_question`` best BM25 hits among the other questions' texts."""
    texts = list(dict.fromkeys(one_line(q.text) for original in originals
                               for q in (original, *original.related) if q.text.strip()))
    ids = {text: index for index, text in enumerate(texts)}
    index = LexicalIndex.build(enumerate(texts))
    negatives = {}
    for original in originals:
        if not any(related.relevant for related in original.related):
            continue
        own = {ids[one_line(q.text)] for q in (original, *original.related) if q.text.strip()}
        hits = index.top(original.text, per_question + len(own))
        negatives[original.id] = [texts[doc] for doc, _ in hits if doc not in own][:per_question]
    return negatives


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="TSV to write")
    parser.add_argument("--per-question", type=int, default=6,
                        help="negatives per original question (a config's labelled_cqa_copies "
                             "uses the next one for each copy)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="the shared data directory (default: $ASKALIKE_DATA or ../shared/data)")
    args = parser.parse_args()
    if args.per_question < 1:
        parser.error("--per-question must be at least 1")
    try:
        originals = read_split_questions(resolve_data_dir(args.data_dir), "train")
    except DataError as err:
        raise SystemExit(f"error: {err}") from None
    negatives = mine_negatives(originals, args.per_question)
    rows = ["\t".join(HARD_NEGATIVES_HEADER)]
    rows += [f"{original}\t{text}" for original, texts in negatives.items() for text in texts]
    write_text_atomically(args.out, "\n".join(rows) + "\n")
    print(f"wrote {args.out}: {len(rows) - 1} negatives for {len(negatives)} original questions")


if __name__ == "__main__":
    main()
