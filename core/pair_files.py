"""A user's labelled pairs, the input of ``askalike tune``: CSV, TSV or JSON Lines with either
``text_a, text_b[, label]`` (label 1 alike, 0 not; without a label column every pair is alike)
or ``text, group`` (the texts of one group are duplicates of each other: every two of a group
make an alike pair). A ``text_a, text_b`` file may also carry a ``score`` column, a graded
similarity on any numeric scale (SICK's 1-5, STS's 0-5), rescaled to [0, 1] by the file's lowest
and highest score; in such a file a row without a label is a scored pair only. Errors name the
file, line and field, as the collection readers' do."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from askalike.core.data_dir import DataError
from askalike.core.datasets import json_objects, numbered_lines, sniff_delimiter
from askalike.core.numbers import decimal

PAIR_COLUMNS = ("text_a", "text_b")
GROUP_COLUMNS = ("text", "group")
MAX_GROUP_PAIRS = 45  # a group's pairs kept (all pairs of its first 10 texts)


@dataclass(frozen=True, slots=True)
class LabelledPair:
    text_a: str
    text_b: str
    label: int | None  # 1 alike, 0 not alike; None: a scored pair without a label
    score: float | None = None  # graded similarity, rescaled to [0, 1] over the file


def _rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV/TSV (header first) or JSON Lines file."""
    if path.suffix.lower() in (".jsonl", ".json"):
        for number, record in json_objects(path):
            yield number, {key: value if isinstance(value, str) else ("" if value is None else str(value))
                           for key, value in record.items()}
        return
    lines = numbered_lines(path)
    numbers: list[int] = []
    first = next(lines, None)
    if first is None:
        raise DataError(path, "file is empty", 1)
    # comma, semicolon or tab, as the header row shows: the separators `index` reads
    delimiter = sniff_delimiter(first[1], "\t" if path.suffix.lower() == ".tsv" else ",")

    def text_lines() -> Iterator[str]:
        yield first[1]
        for number, line in lines:
            numbers.append(number)
            yield line

    reader = csv.reader(text_lines(), delimiter=delimiter)
    header = [name.strip().lower() for name in next(reader)]
    for row in reader:
        if not any(field.strip() for field in row):
            continue
        if len(row) != len(header):
            raise DataError(path, f"{len(row)} fields where the header has {len(header)}", numbers[-1])
        yield numbers[-1], dict(zip(header, row, strict=True))


def _field(path: Path, number: int, row: dict[str, str], name: str) -> str:
    value = row.get(name, "").strip()
    if not value:
        raise DataError(path, f"field {name!r} is empty", number)
    return value


def _label(path: Path, number: int, row: dict[str, str], scored: bool) -> int | None:
    """The row's label; an empty one is alike, or no label at all in a file with scores."""
    value = row.get("label", "").strip()
    if value == "":
        return None if scored else 1
    if value not in ("0", "1", "0.0", "1.0"):
        raise DataError(path, f"field 'label' must be 1 (alike) or 0 (not alike), not {value!r}", number)
    return int(float(value))


def _score(path: Path, number: int, row: dict[str, str]) -> float | None:
    value = row.get("score", "").strip()
    if value == "":
        return None
    score = decimal(value)
    if score is None:
        raise DataError(path, f"field 'score' must be a number (a graded similarity), not {value!r}", number)
    return score


def _rescaled(path: Path, pairs: list[LabelledPair]) -> list[LabelledPair]:
    """The scores mapped from the file's lowest..highest onto [0, 1]."""
    scores = [pair.score for pair in pairs if pair.score is not None]
    if not scores:
        return pairs
    low, high = min(scores), max(scores)
    if high == low:
        raise DataError(path, f"field 'score' is {low:g} on every row: a graded similarity needs "
                              "at least two values")
    return [pair if pair.score is None else dataclasses.replace(pair, score=(pair.score - low) / (high - low))
            for pair in pairs]


def _pair(path: Path, number: int, row: dict[str, str]) -> LabelledPair:
    scored = "score" in row
    pair = LabelledPair(_field(path, number, row, "text_a"), _field(path, number, row, "text_b"),
                        _label(path, number, row, scored), _score(path, number, row) if scored else None)
    if pair.label is None and pair.score is None:
        raise DataError(path, "fields 'label' and 'score' are both empty: a pair needs one", number)
    return pair


def read_labelled_pairs(path: Path) -> list[LabelledPair]:
    """The pairs of a pair file, in file order (scores rescaled to [0, 1]); a DataError naming
    file, line and field for a row that cannot be read, and for a file with neither an alike
    pair nor a score."""
    pairs: list[LabelledPair] = []
    groups: dict[str, list[str]] = defaultdict(list)
    columns: tuple[str, ...] | None = None
    for number, row in _rows(path):
        if columns is None:
            columns = next((c for c in (PAIR_COLUMNS, GROUP_COLUMNS) if all(k in row for k in c)), None)
            if columns is None:
                raise DataError(path, f"needs the columns text_a, text_b[, label] or text, group "
                                      f"(found: {', '.join(row) or 'none'})", number)
        if columns == PAIR_COLUMNS:
            pairs.append(_pair(path, number, row))
        else:
            groups[_field(path, number, row, "group")].append(_field(path, number, row, "text"))
    for texts in groups.values():
        pairs.extend(LabelledPair(a, b, 1)
                     for a, b in itertools.islice(itertools.combinations(texts, 2), MAX_GROUP_PAIRS))
    if not any(pair.label == 1 or pair.score is not None for pair in pairs):
        raise DataError(path, "no alike pairs (label 1, or a group of two texts or more) and no scores")
    return _rescaled(path, pairs)


def text_fraction(text: str) -> float:
    """Where a text falls in [0, 1), fixed by the SHA-256 of its normalised form (lower case,
    single spaces): splits that keep every pair of a text on one side."""
    key = " ".join(text.lower().split()).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
