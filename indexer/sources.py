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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from askalike.core.datasets import DataError, json_lines, numbered_lines, sniff_delimiter
from askalike.core.dates import ORDER_OPTION, DateOrder, DateValueError, parse_date
from askalike.core.text import join_subject_body
from askalike.indexer.choices import OnError

SUBJECT_COLUMNS = ("subject", "title", "question", "text")  # the first one a source has
BODY_COLUMN = "body"
ID_COLUMN = "id"
DATE_KEY, CATEGORY_KEY = "date", "category"  # metadata that search filters on
BAD_ROWS_SHOWN = 20  # bad rows named when --on-error stop refuses a run (all are counted)
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
    # an id made from the text: the id an askalike before made_id's separator made (``former_made_id``)
    former_id: str | None = None
    date_field: str = DATE_KEY  # the metadata key of its date (--date-column)
    category_field: str = CATEGORY_KEY  # the metadata key of its category (--category-column)

    @property
    def category(self) -> Any:
        """Its category as given (None: none), what category filters compare."""
        return self.metadata.get(self.category_field)

    @property
    def text(self) -> str:
        """What the encoder embeds."""
        return join_subject_body(self.subject, self.body)

    @property
    def content_hash(self) -> str:
        """Changes exactly when the embedded text changes (metadata edits need no new vector)."""
        return content_hash(self.subject, self.body)


def content_hash(subject: str, body: str) -> str:
    """The sha256 of the text a question is embedded from (``join_subject_body``), stored with it:
    a re-run compares it to know what to embed again, ``check`` to find text edited in place."""
    return hashlib.sha256(join_subject_body(subject, body).encode("utf-8")).hexdigest()


Row = SourceQuestion | DataError
T = TypeVar("T")


def clean_text(value: Any) -> str:
    """Text as it is stored: as given, but for line endings made ``\n`` (a CSV field's CRLF and a
    JSON string's must read the same) and NUL removed (no database keeps it in text). Other
    control characters are kept; whatever shows the text escapes them (``app.safe_text``)."""
    text = "" if value is None else str(value)
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


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
    """Metadata as every database stores it: strings (keys too) as ``clean_text`` keeps them;
    ValueError naming the field for NaN or infinite numbers (JSON has none) and for
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
              metadata: dict[str, Any], id_column: str = ID_COLUMN) -> Row:
    external_id = normalize_id(raw_id) if raw_id is not None else ""
    if not external_id:
        return DataError(path, f"missing or empty {id_column!r}", line)
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


def _json_type_problem(record: dict[str, Any], id_key: str, text_keys: list[str]) -> str | None:
    """What is wrong with the types of a record's id and text fields: the id must be a string or
    an integer (a float id or a boolean is a spreadsheet's or a program's slip, and would be
    stored as "1.0" or "True"), the texts strings (null: no text)."""
    value = record.get(id_key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
        return f"{id_key!r} is {_JSON_TYPES[type(value)]}; expected a string or an integer"
    for key in text_keys:
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key!r} is {_JSON_TYPES[type(value)]}; expected a string"
    return None




@dataclass(frozen=True)
class Columns:
    """Which columns of a CSV/TSV file (keys of a JSON Lines record) hold what. The defaults
    find them by name: ``id``; the first of SUBJECT_COLUMNS and ``body``; every other column
    as metadata. A CSV/TSV file without an id column gets ids made from its text (``made_id``)."""

    id: str | None = None
    text: tuple[str, ...] = ()  # the first is the subject tables show, the rest joined as the body
    metadata: tuple[str, ...] | None = None  # None: every column that is not id or text
    date: str = DATE_KEY  # the column whose values date filters compare (--date-column)
    category: str = CATEGORY_KEY  # the column category filters compare (--category-column)

    def __post_init__(self) -> None:  # compared as headers are: trimmed, lower case
        object.__setattr__(self, "id", _column_name(self.id) if self.id is not None else None)
        object.__setattr__(self, "date", _column_name(self.date))
        object.__setattr__(self, "category", _column_name(self.category))
        object.__setattr__(self, "text", tuple(map(_column_name, self.text)))
        if self.metadata is not None:
            object.__setattr__(self, "metadata", tuple(map(_column_name, self.metadata)))

    @property
    def default(self) -> bool:
        return self == Columns()


def _column_name(name: str) -> str:
    return name.strip().lower()


def made_id(texts: list[str], seen: dict[str, int]) -> str:
    """The id of a question from a file without ids: the first 12 hex digits of the sha256 of its
    text cells (subject, body, or the --text-column cells) written as a JSON array, so that it
    survives rows being added, removed or reordered and no two texts share it by where they are
    cut (``renew visa|how long`` and ``renew|visa how long``); an edited question gets a new id.
    A text repeated in the file gets ``-2``, ``-3``... in file order (``seen`` counts)."""
    return _numbered(json.dumps(texts, ensure_ascii=False), seen)


_FORMER_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # what text was stored without


def former_made_id(subject: str, body: str, seen: dict[str, int]) -> str:
    """The id askalike made for the same row before ``made_id`` (from the subject and body
    joined, control characters dropped), so that an index built then keeps its questions: an
    index run gives them their new ids (``IndexReport.renamed``) instead of adding them again."""
    def former(text: str) -> str:
        return _FORMER_CONTROL.sub("", text)
    return _numbered(join_subject_body(former(subject), former(body)), seen)


def _numbered(text: str, seen: dict[str, int]) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    seen[digest] = seen.get(digest, 0) + 1
    return digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"


@dataclass(frozen=True)
class _Layout:
    """A delimited file's header read through ``Columns``: which column is what."""

    header: list[str]
    id_column: str | None  # None: ids made from the text
    text_columns: list[str]
    metadata_columns: list[str]


def _layout(path: Path, header: list[str], columns: Columns) -> _Layout:
    roles = (("--id-column", [columns.id] if columns.id else []), ("--text-column", columns.text),
             ("--metadata-column", columns.metadata or ()),
             ("--date-column", [columns.date] if columns.date != DATE_KEY else []),
             ("--category-column", [columns.category] if columns.category != CATEGORY_KEY else []))
    missing = [(option, name) for option, names in roles for name in names if name not in header]
    if missing:
        option, name = missing[0]
        raise DataError(path, f"no column {name!r} ({option}) in the header {header}", 1)
    id_column = columns.id or (ID_COLUMN if ID_COLUMN in header else None)
    text_columns = list(columns.text) or [name for name in (next(
        (name for name in SUBJECT_COLUMNS if name in header), None), BODY_COLUMN) if name in header]
    if not text_columns:
        raise DataError(path, f"the header {header} has none of the text columns "
                              f"{[*SUBJECT_COLUMNS, BODY_COLUMN]}: name them with --text-column", 1)
    taken = {id_column, *text_columns}
    metadata = list(columns.metadata) if columns.metadata is not None else [
        name for name in header if name not in taken]
    for option, name in (("--date-column", columns.date), ("--category-column", columns.category)):
        if name in header and name not in metadata:
            if name in taken:
                raise DataError(path, f"column {name!r} ({option}) is also the id or a text column", 1)
            metadata.append(name)  # a role's column is kept whatever --metadata-column says
    return _Layout(header, id_column, text_columns, metadata)


def _subject_and_body(record: dict[str, Any], text_columns: list[str]) -> tuple[Any, str]:
    """The first text column as the subject, the others joined (blank lines between) as the body."""
    rest = [record[name] for name in text_columns[1:] if record.get(name) not in (None, "")]
    body = rest[0] if len(rest) == 1 else "\n\n".join(str(value).strip() for value in rest)
    return record.get(text_columns[0]), body


def record_question(path: Path, number: int | None, record: dict[str, Any],
                    columns: Columns = Columns()) -> Row:
    """One JSON object as a question (a JSON Lines row, or one that a program sent), validated
    as every indexed row is; ``path`` and ``number`` name where it came from in the error."""
    id_key = columns.id or ID_COLUMN
    subject_key = next((key for key in SUBJECT_COLUMNS if key in record), "")
    text_keys = list(columns.text) or [subject_key, BODY_COLUMN]
    if problem := _json_type_problem(record, id_key, text_keys):
        return DataError(path, problem, number)
    taken = {id_key, *text_keys}
    kept = None if columns.metadata is None else {*columns.metadata, columns.date, columns.category}
    metadata = ({k: v for k, v in record.items() if k in kept} if kept is not None
                else {k: v for k, v in record.items() if k not in taken})
    subject, body = _subject_and_body(record, text_keys)
    return _question(path, number, record.get(id_key), subject or "", body, metadata, id_key)


def _jsonl_rows(path: Path, columns: Columns) -> Iterator[Row]:
    for number, record in json_lines(path, unique_keys=True):
        yield record if isinstance(record, DataError) else record_question(path, number, record, columns)


def read_header(path: Path, columns: Columns) -> tuple[str, _Layout]:
    """The separator and layout of a CSV/TSV file, from its first line."""
    default = "\t" if source_format(path) == ".tsv" else ","
    lines = numbered_lines(path)
    first = next(lines, (1, ""))[1]
    lines.close()
    delimiter = sniff_delimiter(first, default)
    try:
        header = next(csv.reader([first + "\n"], delimiter=delimiter, strict=True), [])
    except csv.Error as err:
        raise DataError(path, f"broken header row: {err}", 1) from None
    if not header:
        raise DataError(path, "empty file: expected a header row", 1)
    header = [_column_name(name) for name in header]
    _require_distinct_columns(path, header)
    return delimiter, _layout(path, header, columns)


def _delimited_rows(path: Path, columns: Columns) -> Iterator[Row]:
    delimiter, layout = read_header(path, columns)
    lines = numbered_lines(path)
    next(lines)  # the header
    reader = csv.reader((text + "\n" for _, text in lines), delimiter=delimiter, strict=True)
    made_ids: dict[str, int] = {}
    former_ids: dict[str, int] = {}
    while True:
        start = reader.line_num + 2  # the reader's lines start after the header
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            # the reader cannot resynchronise after broken quoting: the rest of the file is lost
            raise DataError(path, f"broken quoting: {err} (the rows after it cannot be told apart, "
                                  "so not even --on-error skip can go past it: fix the quotes)",
                            start) from None
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(layout.header):
            yield DataError(path, f"expected {len(layout.header)} fields ({', '.join(layout.header)}), "
                                  f"got {len(row)}", start)
            continue
        record = dict(zip(layout.header, row, strict=True))
        subject, body = _subject_and_body(record, layout.text_columns)
        metadata = {name: record[name] for name in layout.metadata_columns if record[name] != ""}
        if layout.id_column:
            yield _question(path, start, record[layout.id_column], subject, body, metadata, layout.id_column)
            continue
        made = made_id([clean_text(record[name]) for name in layout.text_columns], made_ids)
        question = _question(path, start, made, subject, body, metadata)
        former = former_made_id(clean_text(subject), clean_text(body), former_ids)
        yield replace(question, former_id=former) if isinstance(question, SourceQuestion) else question


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
    from askalike.core.cqa_questions import OriginalQuestion, read_cqa_collection  # XML parsing: only here

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


READERS: dict[str, Callable[[Path, Columns], Iterator[Row]]] = {
    ".jsonl": _jsonl_rows, ".ndjson": _jsonl_rows, ".csv": _delimited_rows, ".tsv": _delimited_rows,
    ".txt": lambda path, _: _text_rows(path), ".xml": lambda path, _: _cqa_xml_rows(path)}
MAPPED_FORMATS = (".jsonl", ".ndjson", ".csv", ".tsv")  # where Columns apply


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


def date_of(value: Any, order: DateOrder | None, order_option: str = ORDER_OPTION) -> datetime | None:
    """A ``date`` metadata value as an instant in UTC (None: no date given); DateValueError for
    a value that is not a date."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DateValueError(f"is {_JSON_TYPES[type(value)]}, not a date")
    return parse_date(str(value), order, order_option).moment


def dated(question: SourceQuestion, order: DateOrder | None, path: Path,
          order_option: str = ORDER_OPTION) -> tuple[SourceQuestion, str | None]:
    """``question`` with its date parsed, and the warning for a value that is not a date (the
    question is kept, undated; an ambiguous one names ``order_option``)."""
    value = question.metadata.get(question.date_field)
    try:
        return replace(question, dated=date_of(value, order, order_option)), None
    except DateValueError as err:
        where = "" if question.line is not None else f"question {question.external_id!r}: "
        return question, str(DataError(path, f"{where}{question.date_field} {value!r} {err}", question.line))


class BadRowsError(DataError):
    """``--on-error stop`` refusing a run for several bad rows: the first BAD_ROWS_SHOWN named, one
    a line, and how many there are, so that one run shows every fix to make."""

    def __init__(self, problems: list[DataError], count: int) -> None:
        self.problems, self.count = problems[:BAD_ROWS_SHOWN], count
        more = count - len(self.problems)
        self._lines = [str(problem) for problem in self.problems]
        if more:
            self._lines.append(f"... and {more:,} more bad rows")
        self._lines.append(f"{count:,} bad rows: nothing was stored; fix them, or index the good rows "
                           "with --on-error skip")
        first = problems[0]
        super().__init__(first.path, first.message, first.line)
        self.args = ("\n".join(self._lines),)

    def __str__(self) -> str:
        return self.args[0]

    def lines(self) -> list[str]:
        return self._lines


def bad_rows(failures: list[DataError]) -> DataError:
    """One error for the bad rows of ``failures`` (each a bad row, or a BadRowsError of several):
    the only one as it is, else a BadRowsError naming them all."""
    problems = [p for failure in failures
                for p in (failure.problems if isinstance(failure, BadRowsError) else [failure])]
    count = sum(failure.count if isinstance(failure, BadRowsError) else 1 for failure in failures)
    return problems[0] if count == 1 else BadRowsError(problems, count)


@dataclass
class SourceFile:
    """A question file read in two passes, so that a large one is never held in memory.

    ``check`` validates every row before anything is stored: with ``OnError.stop`` a bad row (or
    a repeated id) raises once the whole file is read (``bad_rows``: all of them); with ``skip``
    it goes to ``problems``. ``columns`` says which columns are what. It keeps only the good
    questions' ids (and where each starts), and counts the dates that are not dates (naming the
    first ``DATE_WARNINGS_KEPT``). ``questions`` then reads the good questions again, in the same
    order; a file changed in between is refused. Both passes parse dates by ``date_order``."""

    path: Path
    on_error: OnError
    date_order: DateOrder | None = None
    columns: Columns = field(default_factory=Columns)
    ids: dict[str, int | None] = field(default_factory=dict)  # good question id -> its line
    former_ids: set[str] = field(default_factory=set)  # the ids made from text the former way
    undated: int = 0  # questions whose date is not a date
    date_warnings: list[str] = field(default_factory=list)  # the first of them, named
    _left_out: set[int] = field(default_factory=set)  # reader positions of bad or repeated rows
    _state: tuple[int, int] | None = None  # size and modification time when checked

    def check(self, problems: list[DataError]) -> Iterator[SourceQuestion]:
        """The first pass: each good question, as it is validated."""
        self._require_mappable()
        require_regular_file(self.path)
        self._state = _file_state(self.path)
        self.ids.clear()
        self.former_ids.clear()
        self._left_out.clear()
        self.undated, self.date_warnings = 0, []
        stopping = self.on_error is OnError.stop
        named: list[DataError] = []  # with --on-error stop: the first bad rows, reported at the end
        count = 0
        try:
            for position, row in enumerate(self._rows()):
                if isinstance(row, SourceQuestion) and row.external_id in self.ids:
                    where = self.ids[row.external_id]
                    row = DataError(self.path, f"duplicate id {row.external_id!r}"
                                               + (f" (first at line {where})" if where else ""), row.line)
                if isinstance(row, DataError):
                    count += 1
                    if not stopping:
                        problems.append(row)
                    elif len(named) < BAD_ROWS_SHOWN:
                        named.append(row)
                    self._left_out.add(position)
                    continue
                yield self._accepted(row)
        except DataError as err:  # the rest of the file cannot be read: always named
            if not named:
                raise
            named = [*named[: BAD_ROWS_SHOWN - 1], err]
            count += 1
        if named:
            raise named[0] if count == 1 else BadRowsError(named, count)

    def _roles(self, row: SourceQuestion) -> SourceQuestion:
        """``row`` with its date and category read from the columns ``columns`` names."""
        if (row.date_field, row.category_field) == (self.columns.date, self.columns.category):
            return row
        return replace(row, date_field=self.columns.date, category_field=self.columns.category)

    def _accepted(self, row: SourceQuestion) -> SourceQuestion:
        """A good question, its id kept and its date parsed (a value that is not a date counted)."""
        row = self._roles(row)
        self.ids[row.external_id] = row.line
        if row.former_id is not None:
            self.former_ids.add(row.former_id)
        row, warning = dated(row, self.date_order, self.path)
        if warning is not None:
            self.undated += 1
            if len(self.date_warnings) < DATE_WARNINGS_KEPT:
                self.date_warnings.append(warning)
        return row

    def questions(self) -> Iterator[SourceQuestion]:
        """The second pass: the good questions that ``check`` passed, in file order."""
        self._require_unchanged()
        for position, row in enumerate(self._rows()):
            if position in self._left_out:
                continue
            if isinstance(row, DataError) or self.ids.get(row.external_id, -1) != row.line:
                raise self._changed()
            yield dated(self._roles(row), self.date_order, self.path)[0]
        self._require_unchanged()

    def holds(self, external_id: str) -> bool:
        """Does the file (as ``check`` read it) hold the stored question ``external_id``: by its
        id, or by the id an older askalike made from its text (``former_id``)?"""
        return external_id in self.ids or external_id in self.former_ids

    @property
    def makes_ids(self) -> bool:
        """Are the ids of this CSV/TSV file made from its text (it has no id column)?"""
        return (source_format(self.path) in (".csv", ".tsv")
                and read_header(self.path, self.columns)[1].id_column is None)

    def _rows(self) -> Iterator[Row]:
        return READERS[source_format(self.path)](self.path, self.columns)

    def _require_mappable(self) -> None:
        if not self.columns.default and source_format(self.path) not in MAPPED_FORMATS:
            raise DataError(self.path, "--id-column, --text-column, --metadata-column, --date-column "
                                       "and --category-column apply to "
                                       f"{', '.join(MAPPED_FORMATS)} files only")

    def _require_unchanged(self) -> None:
        if self._state is None or _file_state(self.path) != self._state:
            raise self._changed()

    def _changed(self) -> DataError:
        return DataError(self.path, "changed while it was being indexed: run the command again")
