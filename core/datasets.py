"""Readers for the public datasets askalike trains and evaluates on (STS, SICK, NLI,
conversations, GloVe), as typed records, and the line-numbered text, TSV and JSON Lines helpers
that every reader builds on. SemEval CQA questions are read by ``core.cqa_questions``.

All readers stream where files are large and raise :class:`DataError` (file, line, what is
wrong) on missing or malformed input, so that callers can print one line instead of a traceback.
The quirks handled here are documented in each data folder's SOURCES.md.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from askalike.core.data_dir import DataError
from askalike.core.numbers import decimal

# --------------------------------------------------------------------------- text files

_NOT_FINITE = re.compile(r"[+-]?(?:nan|inf(?:inity)?)", re.IGNORECASE)


def _open_binary(path: Path) -> IO[bytes]:
    if not path.is_file():
        raise DataError(path, "file not found")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without its line ending) of a UTF-8 file, gzip by suffix.

    Lines are decoded one at a time so that invalid bytes are reported at their own line;
    CRLF endings (SICK) are stripped like LF, and a UTF-8 byte order mark is dropped.
    """
    with _open_binary(path) as handle:
        yield from decoded_lines(path, handle)


def decoded_lines(name: Path | str, handle: IO[bytes]) -> Iterator[tuple[int, str]]:
    """``numbered_lines`` of an open binary stream (a file, or piped stdin); errors name ``name``."""
    number = 0
    try:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(UTF16_MARKS):
                raise DataError(name, "UTF-16 text; askalike reads UTF-8: convert the file first "
                                "(e.g. iconv -f UTF-16 -t UTF-8)", number)
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataError(name, f"not valid UTF-8 at byte {err.start} of the line",
                                number) from None
            yield number, text.rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as err:  # zlib: a damaged .gz
        raise DataError(name, f"cannot read ({err})", number + 1) from None


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Tab-separated rows with no quote handling (``csv.QUOTE_NONE``): sentences contain quotes."""
    for number, line in numbered_lines(path):
        if line.strip():
            yield number, next(csv.reader([line], delimiter="\t", quoting=csv.QUOTE_NONE))


def _fields(path: Path, number: int, row: list[str], minimum: int, what: str) -> list[str]:
    if len(row) < minimum:
        raise DataError(path, f"expected at least {minimum} tab-separated fields ({what}), got {len(row)}",
                        number)
    return row


def parse_number(path: Path, number: int, text: str, name: str) -> float:
    """The number in field ``name`` of line ``number`` (``core.numbers.decimal``: decimal digits,
    not Python's ``1_000``); a ``DataError`` when it is not one, or not finite (a NaN would order
    and average as no score does)."""
    value = decimal(text)
    if value is None:
        what = "give a finite number" if _NOT_FINITE.fullmatch(text.strip()) else "not a number"
        raise DataError(path, f"{name} is {text!r}: {what}", number)
    return value


def _expect_header(path: Path, rows: Iterator[tuple[int, list[str]]], expected: list[str]) -> None:
    first = next(rows, None)
    if first is None:
        raise DataError(path, "file is empty", 1)
    number, header = first
    if header[: len(expected)] != expected:
        raise DataError(path, f"expected header {expected}, got {header}", number)


# --------------------------------------------------------------------------- STS


@dataclass(frozen=True, slots=True)
class StsPair:
    """A sentence pair with a gold similarity score (STS Benchmark, STS 2012-2016, SICK)."""

    sentence1: str
    sentence2: str
    score: float
    genre: str
    source: str = ""


STSB_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}


def stsb_path(data_dir: Path, split: str) -> Path:
    return data_dir / "stsbenchmark" / STSB_FILES[split]


def read_sts_benchmark(path: Path) -> Iterator[StsPair]:
    """STS Benchmark rows: genre, file, year, id, score, sentence1, sentence2 (+ ignored extras).

    The train file writes genre ``main-forum``; dev and test write ``main-forums``: one genre.
    """
    for number, row in _tsv_rows(path):
        genre, file, year, sid, score, s1, s2 = _fields(path, number, row, 7, "STS Benchmark row")[:7]
        yield StsPair(
            sentence1=s1,
            sentence2=s2,
            score=parse_number(path, number, score, "score"),
            genre="main-forums" if genre == "main-forum" else genre,
            source=f"{file} {year} {sid}",
        )


def read_sts_year(directory: Path) -> Iterator[StsPair]:
    """One STS 2012-2016 test folder: ``STS.input.<set>.txt`` with ``STS.gs.<set>.txt``.

    Pairs whose gold line is empty were not scored by the organisers and are skipped.
    """
    inputs = sorted(directory.glob("STS.input.*.txt"))
    if not inputs:
        raise DataError(directory, "no STS.input.*.txt files")
    for input_path in inputs:
        set_name = input_path.name[len("STS.input.") : -len(".txt")]
        gold_path = directory / f"STS.gs.{set_name}.txt"
        gold_lines = list(numbered_lines(gold_path))
        pairs = list(numbered_lines(input_path))
        if len(gold_lines) != len(pairs):
            raise DataError(gold_path, f"{len(gold_lines)} gold lines for {len(pairs)} input lines")
        for (number, line), (_, gold) in zip(pairs, gold_lines, strict=True):
            if not gold.strip():
                continue
            row = _fields(input_path, number, line.split("\t"), 2, "sentence1, sentence2")
            yield StsPair(
                sentence1=row[0],
                sentence2=row[1],
                score=parse_number(gold_path, number, gold.strip(), "gold score"),
                genre=set_name,
                source=f"{directory.name}:{number}",
            )


@dataclass(frozen=True, slots=True)
class SickPair:
    pair_id: str
    sentence1: str
    sentence2: str
    relatedness: float
    entailment: str  # ENTAILMENT | NEUTRAL | CONTRADICTION
    split: str  # TRAIN | TRIAL | TEST


def read_sick(path: Path, split: str | None = None) -> Iterator[SickPair]:
    """SICK: the full ``SICK.txt`` (12 columns, split in SemEval_set) or a SemEval-2014 file
    (5 columns; give its ``split``). Both may have CRLF line endings."""
    rows = _tsv_rows(path)
    first = next(rows, None)
    if first is None:
        raise DataError(path, "file is empty", 1)
    header = first[1]
    if header[:3] != ["pair_ID", "sentence_A", "sentence_B"]:
        raise DataError(path, f"not a SICK file: header {header[:3]}", first[0])
    full_release = "SemEval_set" in header
    columns = {name: index for index, name in enumerate(header)}
    label_column = columns["entailment_label" if full_release else "entailment_judgment"]
    for number, row in rows:
        _fields(path, number, row, len(header), "SICK row")
        yield SickPair(
            pair_id=row[0],
            sentence1=row[1],
            sentence2=row[2],
            relatedness=parse_number(path, number, row[columns["relatedness_score"]], "relatedness_score"),
            entailment=row[label_column],
            split=row[columns["SemEval_set"]] if full_release else (split or "").upper(),
        )


# --------------------------------------------------------------------------- NLI, conversations


NLI_LABELS = ("entailment", "neutral", "contradiction")


@dataclass(frozen=True, slots=True)
class NliPair:
    label: str
    premise: str
    hypothesis: str


def read_nli(path: Path) -> Iterator[NliPair]:
    """gzip TSV with header ``gold_label sentence1 sentence2`` (SNLI dev/test and ``nli/``)."""
    rows = _tsv_rows(path)
    _expect_header(path, rows, ["gold_label", "sentence1", "sentence2"])
    for number, row in rows:
        fields = _fields(path, number, row, 3, "gold_label, sentence1, sentence2")
        label, premise, hypothesis = fields[:3]
        if label not in NLI_LABELS:
            raise DataError(path, f"unknown label {label!r} (expected one of {NLI_LABELS})", number)
        yield NliPair(label=label, premise=premise, hypothesis=hypothesis)


@dataclass(frozen=True, slots=True)
class ConversationPair:
    input: str
    response: str


def read_conversations(path: Path) -> Iterator[ConversationPair]:
    """gzip TSV with header ``input response``, streamed (the Reddit file has 286k pairs)."""
    rows = _tsv_rows(path)
    _expect_header(path, rows, ["input", "response"])
    for number, row in rows:
        if len(row) != 2 or not row[0] or not row[1]:
            raise DataError(path, f"expected 2 non-empty fields (input, response), got {len(row)}",
                            number)
        yield ConversationPair(input=row[0], response=row[1])


HARD_NEGATIVES_HEADER = ["original_id", "negative"]


def read_hard_negatives(path: Path) -> dict[str, list[str]]:
    """TSV with header ``original_id negative``: each CQA original question's hard negatives,
    in file order (``python -m askalike.train.bm25_negatives`` writes one)."""
    rows = _tsv_rows(path)
    _expect_header(path, rows, HARD_NEGATIVES_HEADER)
    negatives: dict[str, list[str]] = {}
    for number, row in rows:
        if len(row) != 2 or not row[0] or not row[1].strip():
            raise DataError(path, "expected 2 non-empty fields (original_id, negative), "
                            f"got {len(row)}", number)
        negatives.setdefault(row[0], []).append(row[1])
    return negatives


def read_word_vectors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """GloVe text format: a word, then its float components, space-separated."""
    dimension: int | None = None
    for number, line in numbered_lines(path):
        word, *values = line.rstrip().split(" ")
        dimension = dimension or len(values)
        if not values or len(values) != dimension:
            raise DataError(path, f"expected {dimension} components, got {len(values)}", number)
        try:
            yield word, np.asarray(values, dtype=np.float32)
        except ValueError:
            raise DataError(path, "a vector component is not a number", number) from None


# --------------------------------------------------------------------------- JSON Lines


class _RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (``json.loads`` keeps the last of a repeated one)."""
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key in record:
            raise _RepeatedKey(key)
        record[key] = value
    return record


class JsonError(ValueError):
    """Text that is not JSON as askalike reads it; the message says what is wrong, and where."""


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # how a JSON text writes half a UTF-16 pair
_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_in(value: Any) -> str | None:
    """The first string (or key) of a parsed JSON value that holds a lone surrogate."""
    if isinstance(value, str):
        return value if _SURROGATE.search(value) else None
    items = (value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list)
             else ())
    for key, item in items:
        found = (key if isinstance(key, str) and _SURROGATE.search(key) else None) or _surrogate_in(item)
        if found is not None:
            return found
    return None


def json_value(text: str | bytes, unique_keys: bool = True) -> Any:
    """``text`` (bytes: UTF-8) as a JSON value, read strictly: a key written twice in one object
    (with ``unique_keys``; ``json.loads`` would keep the last) and a string holding half of a
    UTF-16 pair (``"\\ud800"``: no character, and text no file or database can store) are
    errors, as is text that is not JSON: a JsonError naming the line and column. The one JSON
    reader of what users give: JSON Lines rows and the HTTP API's request bodies."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise JsonError(f"not valid UTF-8 at byte {err.start}") from None
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys if unique_keys else None)
    except json.JSONDecodeError as err:
        where = f"column {err.colno}" if err.lineno == 1 else f"line {err.lineno}, column {err.colno}"
        raise JsonError(f"invalid JSON: {err.msg} ({where})") from None
    except _RepeatedKey as err:
        raise JsonError(f"key {err.args[0]!r} appears twice in one object; keep one of them") from None
    except RecursionError:
        raise JsonError("JSON nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text) and (bad := _surrogate_in(value)) is not None:
        half = next(char for char in bad if _SURROGATE.fullmatch(char))
        raise JsonError(f"the string {bad[:40]!r} holds \\u{ord(half):04x}, half of a UTF-16 pair, "
                        "which is no character: fix the program that wrote it")
    return value


def json_lines(path: Path, unique_keys: bool = False) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    """(line number, object) of each non-blank line of a JSON Lines file (``json_value``); a line
    that is not a JSON object (or, with ``unique_keys``, one that repeats a key) comes as a
    ``DataError`` value, so that a caller may skip it or raise it."""
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            record = json_value(line, unique_keys)
        except JsonError as err:
            yield number, DataError(path, str(err), number)
            continue
        if not isinstance(record, dict):
            yield number, DataError(path, f"expected a JSON object, got {type(record).__name__}", number)
            continue
        yield number, record


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Like ``json_lines``, but the first bad line is raised."""
    for number, record in json_lines(path):
        if isinstance(record, DataError):
            raise record
        yield number, record


DELIMITERS = (",", ";", "\t")  # a .csv or .tsv file may use any of them: the header says which


def sniff_delimiter(header_line: str, default: str) -> str:
    """The separator of a header line: the one of DELIMITERS it has most often outside quotes
    (``default`` when it has none: a one-column file)."""
    unquoted = re.sub(r'"[^"]*"', "", header_line)
    counts = {delimiter: unquoted.count(delimiter) for delimiter in DELIMITERS}
    best = max(counts, key=lambda delimiter: (counts[delimiter], delimiter == default))
    return best if counts[best] else default
