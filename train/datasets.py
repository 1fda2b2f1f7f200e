"""Readers for every public dataset askalike uses, as typed records.

All readers stream where files are large and raise :class:`DataError` (file, line, what is
wrong) on missing or malformed input, so that callers can print one line instead of a traceback.
The quirks handled here are documented in each data folder's SOURCES.md.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as safe_et
import numpy as np
from defusedxml import DefusedXmlException

from train.errors import UserError
from train.files import atomic_write

DATA_ENV_VAR = "ASKALIKE_DATA"
_CHECKOUT = Path(__file__).resolve().parent.parent


class DataError(UserError):
    """A dataset file is missing or malformed; the message names the file and line."""

    def __init__(self, path: Path | str, message: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")


def resolve_data_dir(explicit: Path | str | None = None) -> Path:
    """The data directory: an explicit path, else $ASKALIKE_DATA, else ../shared/data beside the checkout."""
    if explicit is not None:
        chosen = Path(explicit)
    elif os.environ.get(DATA_ENV_VAR):
        chosen = Path(os.environ[DATA_ENV_VAR])
    else:
        chosen = _CHECKOUT.parent / "shared" / "data"
    if not chosen.is_dir():
        raise DataError(chosen, f"data directory not found (set --data-dir or ${DATA_ENV_VAR})")
    return chosen


# --------------------------------------------------------------------------- text files


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
        number = 0
        try:
            for number, raw in enumerate(handle, start=1):
                if number == 1 and raw.startswith(UTF16_MARKS):
                    raise DataError(path, "UTF-16 text; askalike reads UTF-8: convert the file first "
                                    "(e.g. iconv -f UTF-16 -t UTF-8)", number)
                try:
                    text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as err:
                    raise DataError(path, f"not valid UTF-8 at byte {err.start} of the line",
                                    number) from None
                yield number, text.rstrip("\r\n")
        except (OSError, EOFError, zlib.error) as err:  # zlib: a damaged .gz
            raise DataError(path, f"cannot read ({err})", number + 1) from None


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


def _number(path: Path, number: int, text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise DataError(path, f"{name} is not a number: {text!r}", number) from None


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
            score=_number(path, number, score, "score"),
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
                score=_number(gold_path, number, gold.strip(), "gold score"),
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
            relatedness=_number(path, number, row[columns["relatedness_score"]], "relatedness_score"),
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


# --------------------------------------------------------------------------- SemEval CQA


RELEVANT_LABELS = frozenset({"PerfectMatch", "Relevant"})


@dataclass(frozen=True, slots=True)
class CqaComment:
    text: str
    id: str | None = None
    date: str | None = None
    username: str | None = None
    relevance_to_relq: str | None = None


@dataclass(frozen=True, slots=True)
class RelatedQuestion:
    """A forum question found by the search engine for an original question (or a bare thread)."""

    id: str
    subject: str
    body: str
    ranking_order: int | None = None
    relevance: str | None = None  # PerfectMatch | Relevant | Irrelevant, when the file gives it
    relevant: bool | None = None  # binary gold, when known
    category: str | None = None
    date: str | None = None
    username: str | None = None
    comments: tuple[CqaComment, ...] = ()

    @property
    def text(self) -> str:
        return join_subject_body(self.subject, self.body)


@dataclass(frozen=True, slots=True)
class OriginalQuestion:
    """A new question with its (usually 10) related questions to rank."""

    id: str
    subject: str
    body: str
    related: tuple[RelatedQuestion, ...] = field(default_factory=tuple)

    @property
    def text(self) -> str:
        return join_subject_body(self.subject, self.body)


def join_subject_body(subject: str, body: str) -> str:
    return f"{subject.strip()} {body.strip()}".strip()


def _relevance(label: str | None) -> tuple[str | None, bool | None]:
    if label is None or label == "?":
        return None, None
    return label, label in RELEVANT_LABELS


def _child_text(element: Element, tag: str) -> str:
    child = element.find(tag)
    return (child.text or "") if child is not None else ""


def _parse_thread(thread: Element) -> RelatedQuestion:
    relq = thread.find("RelQuestion")
    if relq is None:
        raise ValueError(f"Thread {thread.get('THREAD_SEQUENCE')!r} has no RelQuestion")
    relq_id = relq.get("RELQ_ID")
    if not relq_id:
        raise ValueError("RelQuestion without RELQ_ID")
    rank = relq.get("RELQ_RANKING_ORDER")
    label, relevant = _relevance(relq.get("RELQ_RELEVANCE2ORGQ"))
    return RelatedQuestion(
        id=relq_id,
        subject=_child_text(relq, "RelQSubject"),
        body=_child_text(relq, "RelQBody"),
        ranking_order=int(rank) if rank is not None else None,
        relevance=label,
        relevant=relevant,
        category=relq.get("RELQ_CATEGORY"),
        date=relq.get("RELQ_DATE"),
        username=relq.get("RELQ_USERNAME"),
        comments=tuple(
            CqaComment(
                text=_child_text(comment, "RelCText"),
                id=comment.get("RELC_ID"),
                date=comment.get("RELC_DATE"),
                username=comment.get("RELC_USERNAME"),
                relevance_to_relq=comment.get("RELC_RELEVANCE2RELQ"),
            )
            for comment in thread.findall("RelComment")
        ),
    )


def _iter_xml_elements(path: Path, tags: set[str]) -> Iterator[Element]:
    """Stream the complete elements named ``tags`` out of an XML file, entity bombs refused."""
    if not path.is_file():
        raise DataError(path, "file not found")
    try:
        for _, element in safe_et.iterparse(str(path), events=("end",)):
            if element.tag in tags:
                yield element
                element.clear()
    except ParseError as err:
        line = err.position[0] if err.position else None
        raise DataError(path, f"malformed XML: {err}", line) from None
    except DefusedXmlException as err:
        raise DataError(path, f"refused unsafe XML: {err}") from None
    except LookupError as err:  # the XML declaration names an encoding Python lacks
        raise DataError(path, f"malformed XML: {err}", 1) from None


def _group_by_original(
    rows: Iterable[tuple[OriginalQuestion, RelatedQuestion]],
) -> Iterator[OriginalQuestion]:
    """Merge consecutive rows of the same original question into one with all its related."""
    current: OriginalQuestion | None = None
    related: list[RelatedQuestion] = []
    for original, relq in rows:
        if current is not None and current.id != original.id:
            yield OriginalQuestion(current.id, current.subject, current.body, tuple(related))
            related = []
        if not related:
            current = original
        related.append(relq)
    if current is not None:
        yield OriginalQuestion(current.id, current.subject, current.body, tuple(related))


def read_cqa_xml(path: Path) -> Iterator[OriginalQuestion]:
    """SemEval Task 3 subtask-B XML (official or reconstructed): original questions, each with
    its related questions. The files repeat an ``OrgQuestion`` element per related question with
    the same ORGQ_ID; consecutive ones are merged."""
    return _group_by_original(_cqa_xml_rows(path))


def _cqa_xml_rows(path: Path) -> Iterator[tuple[OriginalQuestion, RelatedQuestion]]:
    for element in _iter_xml_elements(path, {"OrgQuestion"}):
        orgq_id = element.get("ORGQ_ID")
        thread = element.find("Thread")
        if not orgq_id or thread is None:
            raise DataError(path, f"OrgQuestion {orgq_id!r} lacks ORGQ_ID or Thread")
        try:
            relq = _parse_thread(thread)
        except ValueError as err:
            raise DataError(path, f"OrgQuestion {orgq_id}: {err}") from None
        original = OriginalQuestion(orgq_id, _child_text(element, "OrgQSubject"),
                                    _child_text(element, "OrgQBody"))
        yield original, relq


def read_cqa_threads(path: Path) -> Iterator[RelatedQuestion]:
    """Every question thread of a CQA XML file (with its comments), including the 2015
    reformatted files whose root holds bare ``Thread`` elements."""
    for element in _iter_xml_elements(path, {"Thread"}):
        try:
            yield _parse_thread(element)
        except ValueError as err:
            raise DataError(path, str(err)) from None


def read_cqa_collection(path: Path) -> Iterator[OriginalQuestion | RelatedQuestion]:
    """Every question of a CQA XML file once per appearance: each original question (its
    repeats merged, without related questions) and each related-question thread with comments."""
    last_original = None
    for element in _iter_xml_elements(path, {"OrgQuestion", "Thread"}):
        if element.tag == "Thread":
            try:
                yield _parse_thread(element)
            except ValueError as err:
                raise DataError(path, str(err)) from None
            continue
        orgq_id = element.get("ORGQ_ID")
        if not orgq_id:
            raise DataError(path, "OrgQuestion without ORGQ_ID")
        if orgq_id != last_original:
            last_original = orgq_id
            yield OriginalQuestion(orgq_id, _child_text(element, "OrgQSubject"),
                                   _child_text(element, "OrgQBody"))


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    """(line number, object) of each non-blank line of a JSON Lines file; a line that is not a
    JSON object comes as a ``DataError`` value, so that a caller may skip it or raise it."""
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            yield number, DataError(path, f"invalid JSON: {err.msg} (column {err.colno})", number)
            continue
        except RecursionError:
            yield number, DataError(path, "JSON nested too deeply", number)
            continue
        if not isinstance(record, dict):
            yield number, DataError(path, f"expected a JSON object, got {type(record).__name__}", number)
            continue
        yield number, record


def _json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, record in json_lines(path):
        if isinstance(record, DataError):
            raise record
        yield number, record


def read_cqa_jsonl(path: Path) -> Iterator[OriginalQuestion]:
    """The reconstructed subtask-B JSONL files: one related question a line, grouped by orgQ.

    Train part 1 carries the 3-way label; the 2017 test only binary gold and unverified comments.
    """
    return _group_by_original(_cqa_jsonl_rows(path))


def _cqa_jsonl_rows(path: Path) -> Iterator[tuple[OriginalQuestion, RelatedQuestion]]:
    for number, record in _json_objects(path):
        try:
            label, relevant = _relevance(record.get("relq_relevance2orgq"))
            if "gold_relevant" in record:
                relevant = bool(record["gold_relevant"])
            original = OriginalQuestion(record["orgq_id"], record["orgq_subject"],
                                        record["orgq_body"])
            relq = RelatedQuestion(
                id=record["relq_id"],
                subject=record["relq_subject"],
                body=record["relq_body"],
                ranking_order=int(record["relq_ranking_order"]),
                relevance=label,
                relevant=relevant,
                comments=tuple(CqaComment(text=text)
                               for text in record.get("relq_comments_unverified", ())),
            )
        except KeyError as err:
            raise DataError(path, f"missing field {err.args[0]!r}", number) from None
        except (TypeError, ValueError) as err:
            raise DataError(path, f"bad field value: {err}", number) from None
        yield original, relq


@dataclass(frozen=True, slots=True)
class CqaRunLine:
    """One line of the five-column format shared by gold ``.relevancy`` files and system
    predictions: ``orgq_id relq_id rank score true|false``."""

    orgq_id: str
    relq_id: str
    rank: int
    score: float
    label: bool
    line: int = 0


def read_cqa_run(path: Path) -> list[CqaRunLine]:
    """Read a gold ``.relevancy`` file or a prediction file. Fields are split on any whitespace,
    as the official scorer does (one official run is space-separated)."""
    lines: list[CqaRunLine] = []
    for number, line in numbered_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 5:
            raise DataError(path, f"expected 5 fields (orgq_id relq_id rank score label), got "
                                  f"{len(fields)}", number)
        orgq_id, relq_id, rank, score, label = fields
        if label not in ("true", "false"):
            raise DataError(path, f"label must be true or false, got {label!r}", number)
        try:
            rank_value = int(rank)
        except ValueError:
            raise DataError(path, f"rank is not an integer: {rank!r}", number) from None
        lines.append(CqaRunLine(orgq_id, relq_id, rank_value, _number(path, number, score, "score"),
                                label == "true", number))
    if not lines:
        raise DataError(path, "no prediction lines")
    return lines


def write_cqa_run(path: Path, lines: Iterable[CqaRunLine]) -> None:
    """Write the official tab-separated prediction format, atomically."""
    with atomic_write(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for item in lines:
            label = "true" if item.label else "false"
            handle.write(f"{item.orgq_id}\t{item.relq_id}\t{item.rank}\t{float(item.score)!r}\t{label}\n")


# --------------------------------------------------------------------------- CQA splits


@dataclass(frozen=True, slots=True)
class CqaSplitFiles:
    questions: tuple[str, ...]  # paths relative to the data directory, read in order
    gold: str | None  # a .relevancy file; None: gold comes from the questions' own labels


CQA_DIR = "semeval-cqa"
CQA_SPLITS: dict[str, CqaSplitFiles] = {
    "train": CqaSplitFiles(
        (f"{CQA_DIR}/SemEval2016-Task3-CQA-QL-train-part1-subtaskB-reconstructed.xml",
         f"{CQA_DIR}/SemEval2016-Task3-CQA-QL-train-part2.xml"),
        None,
    ),
    "dev2016": CqaSplitFiles(
        (f"{CQA_DIR}/SemEval2016-Task3-CQA-QL-dev.xml",),
        f"{CQA_DIR}/SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy",
    ),
    "test2016": CqaSplitFiles(
        (f"{CQA_DIR}/SemEval2016-Task3-CQA-QL-test-input.xml",),
        f"{CQA_DIR}/SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy",
    ),
    "test2017": CqaSplitFiles(
        (f"{CQA_DIR}/SemEval2017-task3-English-test-input-subtaskB-reconstructed.xml",),
        f"{CQA_DIR}/SemEval2017-Task3-CQA-QL-test.xml.subtaskB.relevancy",
    ),
}


@dataclass(frozen=True, slots=True)
class CqaSplit:
    name: str
    questions: tuple[OriginalQuestion, ...]
    gold: tuple[CqaRunLine, ...]


def read_cqa_questions(path: Path) -> Iterator[OriginalQuestion]:
    """Original questions from a CQA file, XML or reconstructed JSONL by suffix."""
    return read_cqa_jsonl(path) if path.suffix == ".jsonl" else read_cqa_xml(path)


def gold_from_labels(questions: Iterable[OriginalQuestion], source: Path) -> list[CqaRunLine]:
    """Gold lines from the questions' own labels, as a ``.relevancy`` file would give them."""
    gold = []
    for question in questions:
        for relq in question.related:
            if relq.relevant is None or relq.ranking_order is None:
                raise DataError(source, f"{relq.id} has no relevance label or ranking order")
            gold.append(CqaRunLine(question.id, relq.id, relq.ranking_order,
                                   1.0 / relq.ranking_order, relq.relevant))
    return gold


def load_cqa_split(data_dir: Path, name: str) -> CqaSplit:
    """The questions and gold of a named split; checks that both cover the same pairs."""
    if name not in CQA_SPLITS:
        raise DataError(data_dir, f"unknown CQA split {name!r} (known: {', '.join(CQA_SPLITS)})")
    files = CQA_SPLITS[name]
    questions = tuple(q for relative in files.questions
                      for q in read_cqa_questions(data_dir / relative))
    if files.gold is None:
        gold = gold_from_labels(questions, data_dir / files.questions[0])
    else:
        gold_path = data_dir / files.gold
        gold = read_cqa_run(gold_path)
        question_pairs = {(q.id, r.id) for q in questions for r in q.related}
        for item in gold:
            if (item.orgq_id, item.relq_id) not in question_pairs:
                raise DataError(gold_path, f"gold pair {item.orgq_id} {item.relq_id} is not in "
                                           f"the {name} questions", item.line)
        if len(gold) != len(question_pairs):
            raise DataError(gold_path, f"{len(gold)} gold lines for {len(question_pairs)} "
                                       f"question pairs of {name}")
    return CqaSplit(name, questions, tuple(gold))
