"""What the CLI's table and the TUI share about a search hit: its cells (match bar, near-duplicate
marks, source name), its plain values for CSV and TSV, and a whole question as markup."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from askalike.app.output import markup_safe
from askalike.app.safe_text import printable

if TYPE_CHECKING:
    from askalike.retrieval.searcher import SearchResult


def similarity_bar(fraction: float, width: int = 10) -> str:
    """A 0-1 figure (a search hit's match) as a bar of ``width`` cells."""
    filled = round(max(0.0, min(fraction, 1.0)) * width)
    return "█" * filled + "░" * (width - filled)


RESULT_FIELDS = ("id", "match", "subject", "excerpt", "category", "date", "source")  # --fields picks
DEFAULT_FIELDS = ("id", "match", "subject", "source")


def result_subject(result: SearchResult) -> str:
    """The subject (the excerpt where there is none), "≈ #N" before that of a near-duplicate of
    hit N, and "(+3 alike)" after that of a hit near-duplicates were folded into."""
    subject = printable(result.subject or result.excerpt, keep="")
    if result.duplicate_of is not None:
        subject = f"≈ #{result.duplicate_of}  {subject}"
    return f"{subject}  (+{len(result.alike)} alike)" if result.alike else subject


def metadata_text(value: Any) -> str:
    """A metadata value as one cell: text as it is, anything else (a list, a number) as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def result_value(result: SearchResult, field: str) -> str | float:
    """One field of a hit as plain text (CSV, TSV): the match as a fraction, the source's whole
    path; a field that is not one of RESULT_FIELDS is the metadata column of that name."""
    if field == "match":
        return round(result.match, 4)
    standard = {"id": result.external_id, "subject": result.subject, "excerpt": result.excerpt,
                "source": result.source, "date": result.date, "category": result.category}
    if field in standard and standard[field] is not None:
        return printable(standard[field], keep="")
    return printable(metadata_text(result.metadata.get(field)), keep="")


def result_row(result: SearchResult, source_labels: Mapping[str, str],
               fields: tuple[str, ...] = DEFAULT_FIELDS, bar_width: int = 10) -> tuple[str, ...]:
    """A search hit as the cells of a table (the CLI's and the TUI's): its rank, then ``fields``;
    the match as a percentage and a bar, the source by its name (``Searcher.source_labels``: the
    file name, with its folder where two sources share one)."""
    cells = {"match": f"{result.match:>4.0%} {similarity_bar(result.match, bar_width)}",
             "subject": result_subject(result),
             "source": printable(source_labels.get(result.source, result.source), keep="")}
    return (str(result.rank), *(cells.get(field) or str(result_value(result, field)) for field in fields))


def question_markup(subject: str, body: str, metadata: dict[str, Any], facts: list[str]) -> str:
    """A whole question as Rich markup (``show``, the TUI): the subject, ``facts`` with every
    metadata field (``name value``) in one dim line, the body, and the comments where the source
    has them."""
    facts = [*facts, *(f"{name} {metadata_text(value)}" for name, value in metadata.items()
                       if name != "comments" and value not in (None, ""))]
    parts = [f"[b]{markup_safe(subject)}[/b]", f"[dim]{markup_safe(' · '.join(facts))}[/dim]", "",
             markup_safe(body)]
    comments = metadata.get("comments") or []
    if comments:
        parts += ["", f"[b]{len(comments)} comments[/b]"]
        for comment in comments:
            who = " · ".join(str(comment[k]) for k in ("username", "date") if comment.get(k))
            parts += [f"[dim]{markup_safe(who)}[/dim]", markup_safe(comment.get("text", "")), ""]
    return "\n".join(parts)
