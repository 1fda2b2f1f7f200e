"""SemEval 2015-2017 Task 3 (Qatar Living) question files as typed records: the official and
reconstructed subtask-B XML, the reconstructed JSONL, bare 2015 threads, and which files make
each split. Training, the indexer and the evaluation read questions through this module; the
five-column gold and prediction files are ``retrieval.cqa_runs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as safe_et
from defusedxml import DefusedXmlException

from askalike.core.data_dir import CQA_SPLITS, DataError
from askalike.core.datasets import json_objects
from askalike.core.text import join_subject_body

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
    """(original, related) for every Thread of every OrgQuestion: the official files give each
    OrgQuestion one Thread, other files put all of an original question's threads in one."""
    for element in _iter_xml_elements(path, {"OrgQuestion"}):
        orgq_id = element.get("ORGQ_ID")
        threads = element.findall("Thread")
        if not orgq_id or not threads:
            raise DataError(path, f"OrgQuestion {orgq_id!r} lacks ORGQ_ID or Thread")
        original = OriginalQuestion(orgq_id, _child_text(element, "OrgQSubject"),
                                    _child_text(element, "OrgQBody"))
        for thread in threads:
            try:
                yield original, _parse_thread(thread)
            except ValueError as err:
                raise DataError(path, f"OrgQuestion {orgq_id}: {err}") from None


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


def read_cqa_jsonl(path: Path) -> Iterator[OriginalQuestion]:
    """The reconstructed subtask-B JSONL files: one related question a line, grouped by orgQ.

    Train part 1 carries the 3-way label; the 2017 test only binary gold and unverified comments.
    """
    return _group_by_original(_cqa_jsonl_rows(path))


def _cqa_jsonl_rows(path: Path) -> Iterator[tuple[OriginalQuestion, RelatedQuestion]]:
    for number, record in json_objects(path):
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


def read_cqa_questions(path: Path) -> Iterator[OriginalQuestion]:
    """Original questions from a CQA file, XML or reconstructed JSONL by suffix."""
    return read_cqa_jsonl(path) if path.suffix == ".jsonl" else read_cqa_xml(path)


# --------------------------------------------------------------------------- splits


def read_split_questions(data_dir: Path, name: str) -> tuple[OriginalQuestion, ...]:
    """The original questions of a named split, its files read in order."""
    if name not in CQA_SPLITS:
        raise DataError(data_dir, f"unknown CQA split {name!r} (known: {', '.join(CQA_SPLITS)})")
    return tuple(q for relative in CQA_SPLITS[name].questions
                 for q in read_cqa_questions(data_dir / relative))
