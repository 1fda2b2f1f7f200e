"""Text as askalike writes it out, never acted on by what reads it: a terminal (``printable``),
a JSON reader that prints it (``json_line``, also the HTTP server's answers) and a spreadsheet
(``SpreadsheetWriter``: every CSV and TSV that a command writes).

Stored text is kept as it was given; these make it safe where it is shown. Light on purpose
(the standard library only): the CLI and the server import it at start-up.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from typing import IO

# C0 and C1 controls, DEL, bidirectional overrides and isolates, and lone surrogates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# what a spreadsheet reads as the start of a formula (OWASP's CSV injection list, whose tab and
# carriage return ``printable`` has already escaped), also after blanks, which some skip
_FORMULA_START = re.compile(r"\s*[=+\-@]")


def _visible(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as Python keeps it (surrogateescape)
        code -= 0xDC00
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, keep: str = "\n\t") -> str:
    """``text`` safe to write to a terminal: control characters other than those in ``keep``,
    bidirectional overrides and undecodable bytes become visible escapes (``\\x1b``,
    ``\\u202e``, ``\\xff``), so that stored text, a source name or a query can neither clear
    the screen, set the window title, reorder what follows nor break the output's encoding."""
    return _UNSAFE.sub(lambda match: match[0] if match[0] in keep else _visible(match[0]), str(text))


def json_line(value: object) -> str:
    """``value`` as one line of JSON, its text readable (not ASCII-escaped) but every character
    a terminal could act on escaped: JSON escapes C0 controls itself, this DEL, C1 and the bidi
    controls too (``\\u009b``), and lone surrogates, which all decode to the same text."""
    return _UNSAFE.sub(lambda match: f"\\u{ord(match[0]):04x}",
                       json.dumps(value, ensure_ascii=False, allow_nan=False))


def spreadsheet_text(text: object) -> str:
    """``text`` as a CSV or TSV cell: ``printable`` on one line (a tab or carriage return as
    ``\\x09``, ``\\x0d``), and a cell that a spreadsheet would take for a formula (it starts with
    ``=``, ``+``, ``-`` or ``@``, after blanks or not) prefixed with ``'``, as OWASP advises, so
    that it is shown as text, never run."""
    cell = printable(text, keep="")
    return f"'{cell}" if _FORMULA_START.match(cell) else cell


class SpreadsheetWriter:
    """CSV or TSV rows (a header first) for a spreadsheet: each text cell through
    ``spreadsheet_text``; numbers (int, float) written as numbers, never prefixed, so that a
    column of figures stays one (a negative figure too)."""

    def __init__(self, handle: IO[str], delimiter: str = ",") -> None:
        self._writer = csv.writer(handle, delimiter=delimiter, lineterminator="\n")

    def row(self, cells: Iterable[object]) -> None:
        self._writer.writerow([cell if isinstance(cell, int | float) and not isinstance(cell, bool)
                               else spreadsheet_text("" if cell is None else cell) for cell in cells])
