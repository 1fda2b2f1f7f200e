"""Question collections to index: JSON Lines, CSV/TSV, plain text and SemEval CQA XML.

Every reader yields ``SourceQuestion``s, or a ``DataError`` as a value for a row that is bad
(so that ``--on-error skip`` can go on with the next row); problems that spoil the whole file
(missing, malformed XML, no id column) are raised.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import itertools
import json
import math
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from core.datasets import DataError, json_lines, numbered_lines
from core.dates import DateOrder, DateValueError, parse_date
from core.text import join_subject_body
from indexer.choices import OnError

SUBJECT_COLUMNS = ("subject", "title", "question", "text")  # the first one a source has
BODY_COLUMN = "body"
ID_COLUMN = "id"
DATE_KEY, CATEGORY_KEY = "date", "category"  # metadata that search filters on
DATE_WARNINGS_KEPT = 20  # dates that are not dates named in a run's summary (all are counted)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # C0 controls but tab and newlines
EXTERNAL_ID_CHARS = 512  # the longest id, and source path, the store's columns hold
SOURCE_CHARS = 1024
METADATA_DEPTH = 32  # nesting of metadata values (PostgreSQL and the JSON codecs have limits)
# a CSV field may be as long as a question in any other format (the csv default is 128 KiB)
csv.field_size_limit(2**31 - 1)


@dataclass(frozen=True)
class SourceQuestion:
    external_id: str
    subject: str
    body: str
    metadata: dict[str, Any] = field(default_factory=dict)
    line: int | None = None  # where the question starts in its file, when the format has lines
    dated: datetime | None = None  # metadata["date"] parsed (in UTC); None: none, or not a date

    @property
    def text(self) -> str:
        """What the encoder embeds."""
        return join_subject_body(self.subject, self.body)

    @property
    def content_hash(self) -> str:
        """Changes exactly when the embedded text changes (metadata edits need no new vector)."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


Row = SourceQuestion | DataError
T = TypeVar("T")


def clean_text(value: Any) -> str:
    """Text with control characters removed (they break terminals and some databases) and line
    endings made ``\n`` (a CSV field's CRLF and a JSON string's must read the same)."""
    text = "" if value is None else str(value)
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def normalize_id(value: Any) -> str:
    """Ids are compared after Unicode NFC and trimming, so ' 12' and '12' are one question."""
    return unicodedata.normalize("NFC", str(value)).strip()


def category_key(value: Any) -> str | None:
    """What a category is compared by: trimmed, NFC and case-folded ('  Visas ' is 'VISAS');
    None for a value that is not a name (a list, an object, nothing)."""
    if value is None or isinstance(value, dict | list):
        return None
    return unicodedata.normalize("NFC", str(value)).strip().casefold() or None


def clean_metadata(value: Any, name: str = "metadata", depth: int = 0) -> Any:
    """Metadata as every database stores it: control characters dropped from strings (keys
    too); ValueError naming the field for NaN or infinite numbers (JSON has none) and for
    nesting deeper than METADATA_DEPTH."""
    if depth > METADATA_DEPTH:
        raise ValueError(f"{name} is nested deeper than {METADATA_DEPTH} levels")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} is {value} (JSON has no NaN or infinite numbers)")
    if isinstance(value, dict):
        return {clean_text(key): clean_metadata(item, f"{name}.{key}", depth + 1)
                for key, item in value.items()}
    if isinstance(value, list):
        return [clean_metadata(item, f"{name}[{i}]", depth + 1) for i, item in enumerate(value)]
    return value


def _question(path: Path, line: int | None, raw_id: Any, subject: Any, body: Any,
              metadata: dict[str, Any]) -> Row:
    external_id = normalize_id(raw_id) if raw_id is not None else ""
    if not external_id:
        return DataError(path, f"missing or empty {ID_COLUMN!r}", line)
    if _CONTROL.search(external_id):
        return DataError(path, f"id {external_id!r} contains control characters", line)
    if len(external_id) > EXTERNAL_ID_CHARS:
        return DataError(path, f"id {external_id[:40]!r}... has {len(external_id)} characters, at "
                               f"most {EXTERNAL_ID_CHARS} are kept", line)
    try:
        metadata = clean_metadata(metadata)
    except ValueError as err:
        return DataError(path, f"question {external_id!r}: {err}", line)
    question = SourceQuestion(external_id, clean_text(subject), clean_text(body), metadata, line)
    if not question.text:
        return DataError(path, f"question {external_id!r} is empty (no subject or body text)", line)
    return question


_JSON_TYPES = {dict: "an object", list: "an array", bool: "a boolean", int: "a number",
               float: "a decimal number", type(None): "null", str: "a string"}


def _json_type_problem(record: dict[str, Any], subject_key: str | None) -> str | None:
    """What is wrong with the types of a record's id and text fields: the id must be a string or
    an integer (a float id or a boolean is a spreadsheet's or a program's slip, and would be
    stored as "1.0" or "True"), the subject and body strings (null: no text)."""
    value = record.get(ID_COLUMN)
    if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
        return f"{ID_COLUMN!r} is {_JSON_TYPES[type(value)]}; expected a string or an integer"
    for key in (subject_key, BODY_COLUMN):
        value = record.get(key) if key else None
        if value is not None and not isinstance(value, str):
            return f"{key!r} is {_JSON_TYPES[type(value)]}; expected a string"
    return None


def record_question(path: Path, number: int | None, record: dict[str, Any]) -> Row:
    """One JSON object as a question (a JSON Lines row, or one that a program sent), validated
    as every indexed row is; ``path`` and ``number`` name where it came from in the error."""
    subject_key = next((key for key in SUBJECT_COLUMNS if key in record), None)
    if problem := _json_type_problem(record, subject_key):
        return DataError(path, problem, number)
    metadata = {k: v for k, v in record.items() if k not in (ID_COLUMN, subject_key, BODY_COLUMN)}
    return _question(path, number, record.get(ID_COLUMN),
                     record.get(subject_key) if subject_key else "", record.get(BODY_COLUMN), metadata)


def _jsonl_rows(path: Path) -> Iterator[Row]:
    for number, record in json_lines(path, unique_keys=True):
        yield record if isinstance(record, DataError) else record_question(path, number, record)


def _delimited_rows(path: Path, delimiter: str) -> Iterator[Row]:
    lines = numbered_lines(path)
    reader = csv.reader((text + "\n" for _, text in lines), delimiter=delimiter, strict=True)
    try:
        header = [name.strip().lower() for name in next(reader)]
    except StopIteration:
        raise DataError(path, "empty file: expected a header row", 1) from None
    except csv.Error as err:
        raise DataError(path, f"broken header row: {err}", 1) from None
    _require_distinct_columns(path, header)
    if ID_COLUMN not in header:
        raise DataError(path, f"no {ID_COLUMN!r} column in the header {header}", 1)
    subject_column = next((name for name in SUBJECT_COLUMNS if name in header), None)
    if subject_column is None and BODY_COLUMN not in header:
        raise DataError(path, f"the header {header} has none of the text columns "
                              f"{[*SUBJECT_COLUMNS, BODY_COLUMN]}", 1)
    text_columns = {ID_COLUMN, subject_column, BODY_COLUMN}
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            # the reader cannot resynchronise after broken quoting: the rest of the file is lost
            raise DataError(path, f"broken quoting: {err}", start) from None
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield DataError(path, f"expected {len(header)} fields ({', '.join(header)}), "
                                  f"got {len(row)}", start)
            continue
        record = dict(zip(header, row, strict=True))
        metadata = {k: v for k, v in record.items() if k not in text_columns and v != ""}
        yield _question(path, start, record[ID_COLUMN],
                        record[subject_column] if subject_column else "", record.get(BODY_COLUMN),
                        metadata)


def _require_distinct_columns(path: Path, header: list[str]) -> None:
    """Refuse a header that names a column twice (any case): a row would keep only the last."""
    seen: dict[str, int] = {}
    for position, name in enumerate(header, start=1):
        if name in seen:
            raise DataError(path, f"column {name!r} appears twice in the header (columns "
                                  f"{seen[name]} and {position}); keep one of them", 1)
        seen[name] = position


def _text_rows(path: Path) -> Iterator[Row]:
    """One question a line, its id the line number; blank lines are skipped."""
    for number, line in numbered_lines(path):
        if line.strip():
            yield _question(path, number, number, line, "", {})


def _cqa_xml_rows(path: Path) -> Iterator[Row]:
    from core.cqa_questions import OriginalQuestion, read_cqa_collection  # XML parsing: only here

    seen: dict[str, str] = {}  # the files repeat questions verbatim: keep the first of each
    for item in read_cqa_collection(path):
        if isinstance(item, OriginalQuestion):
            row = _question(path, None, item.id, item.subject, item.body, {"kind": "original"})
        else:
            metadata = {"kind": "related", "category": item.category, "date": item.date,
                        "username": item.username,
                        "comments": [{"id": c.id, "date": c.date, "username": c.username,
                                      "text": clean_text(c.text)} for c in item.comments]}
            row = _question(path, None, item.id, item.subject, item.body,
                            {k: v for k, v in metadata.items() if v is not None})
        if isinstance(row, SourceQuestion):
            fingerprint = json.dumps([row.subject, row.body, row.metadata], sort_keys=True)
            if seen.get(row.external_id) == fingerprint:
                continue
            seen.setdefault(row.external_id, fingerprint)
        yield row


READERS = {".jsonl": _jsonl_rows, ".ndjson": _jsonl_rows, ".csv": lambda p: _delimited_rows(p, ","),
           ".tsv": lambda p: _delimited_rows(p, "\t"), ".txt": _text_rows, ".xml": _cqa_xml_rows}


def source_format(path: Path) -> str:
    suffixes = path.suffixes
    suffix = suffixes[-2] if len(suffixes) > 1 and suffixes[-1] == ".gz" else path.suffix
    if suffix.lower() not in READERS:
        raise DataError(path, f"unknown source format {suffix or '(no suffix)'!r}: use one of "
                              f"{', '.join(READERS)} (optionally .gz, except .xml)")
    return suffix.lower()


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last may be shorter), read lazily."""
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _printable_path(path: Path) -> str:
    """``path`` as it can be printed: bytes of its name that are not UTF-8 as escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def require_regular_file(path: Path) -> os.stat_result:
    """The status of ``path``, a regular file with a UTF-8 name (the store keeps names as text);
    a DataError saying what it is otherwise."""
    shown = _printable_path(path)
    if shown != str(path):
        raise DataError(shown, "the file name is not valid UTF-8: rename the file (e.g. with "
                               "`convmv`) and index it again")
    try:
        status = path.stat()
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except OSError as err:
        reason = "a loop of symbolic links" if err.errno == errno.ELOOP else err.strerror
        raise DataError(path, f"cannot open: {reason}") from None
    if stat.S_ISDIR(status.st_mode):
        raise DataError(path, f"is a directory, not a file: give the files in it (e.g. {path}/*.csv)")
    if stat.S_ISFIFO(status.st_mode):
        raise DataError(path, "is a named pipe (FIFO), not a file: askalike reads each source twice, "
                              "so save it to a file first")
    if not stat.S_ISREG(status.st_mode):
        raise DataError(path, "is not a regular file (a device or a socket?)")
    return status


def _file_state(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def date_of(value: Any, order: DateOrder | None) -> datetime | None:
    """A ``date`` metadata value as an instant in UTC (None: no date given); DateValueError for
    a value that is not a date."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DateValueError(f"is {_JSON_TYPES[type(value)]}, not a date")
    return parse_date(str(value), order).moment


def dated(question: SourceQuestion, order: DateOrder | None, path: Path) -> tuple[SourceQuestion, str | None]:
    """``question`` with its date parsed, and the warning for a value that is not a date (the
    question is kept, undated)."""
    value = question.metadata.get(DATE_KEY)
    try:
        return replace(question, dated=date_of(value, order)), None
    except DateValueError as err:
        where = "" if question.line is not None else f"question {question.external_id!r}: "
        return question, str(DataError(path, f"{where}{DATE_KEY} {value!r} {err}", question.line))


@dataclass
class SourceFile:
    """A question file read in two passes, so that a large one is never held in memory.

    ``check`` validates every row before anything is stored: a bad row (or a repeated id) raises
    with ``OnError.stop``; with ``skip`` it goes to ``problems``. It keeps only the good
    questions' ids (and where each starts), and counts the dates that are not dates (naming the
    first ``DATE_WARNINGS_KEPT``). ``questions`` then reads the good questions again, in the same
    order; a file changed in between is refused. Both passes parse dates by ``date_order``."""

    path: Path
    on_error: OnError
    date_order: DateOrder | None = None
    ids: dict[str, int | None] = field(default_factory=dict)  # good question id -> its line
    undated: int = 0  # questions whose date is not a date
    date_warnings: list[str] = field(default_factory=list)  # the first of them, named
    _left_out: set[int] = field(default_factory=set)  # reader positions of bad or repeated rows
    _state: tuple[int, int] | None = None  # size and modification time when checked

    def check(self, problems: list[DataError]) -> Iterator[SourceQuestion]:
        """The first pass: each good question, as it is validated."""
        reader = READERS[source_format(self.path)]
        require_regular_file(self.path)
        self._state = _file_state(self.path)
        self.ids.clear()
        self._left_out.clear()
        self.undated, self.date_warnings = 0, []
        for position, row in enumerate(reader(self.path)):
            if isinstance(row, SourceQuestion) and row.external_id in self.ids:
                where = self.ids[row.external_id]
                row = DataError(self.path, f"duplicate id {row.external_id!r}"
                                           + (f" (first at line {where})" if where else ""), row.line)
            if isinstance(row, DataError):
                if self.on_error is OnError.stop:
                    raise row
                problems.append(row)
                self._left_out.add(position)
                continue
            self.ids[row.external_id] = row.line
            row, warning = dated(row, self.date_order, self.path)
            if warning is not None:
                self.undated += 1
                if len(self.date_warnings) < DATE_WARNINGS_KEPT:
                    self.date_warnings.append(warning)
            yield row

    def questions(self) -> Iterator[SourceQuestion]:
        """The second pass: the good questions that ``check`` passed, in file order."""
        self._require_unchanged()
        for position, row in enumerate(READERS[source_format(self.path)](self.path)):
            if position in self._left_out:
                continue
            if isinstance(row, DataError) or self.ids.get(row.external_id, -1) != row.line:
                raise self._changed()
            yield dated(row, self.date_order, self.path)[0]
        self._require_unchanged()

    def _require_unchanged(self) -> None:
        if self._state is None or _file_state(self.path) != self._state:
            raise self._changed()

    def _changed(self) -> DataError:
        return DataError(self.path, "changed while it was being indexed: run the command again")
