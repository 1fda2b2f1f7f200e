"""Numbers as people write them in files, options and request parameters, read strictly.

Python's ``float`` and ``int`` take more than a number format: ``1_000`` (a digit separator),
``nan``, ``inf``, ``infinity``, digits of other scripts (``١٢``) and, for ``float``, ``1e400``
(infinite). A file or an option holding one of those is a slip, not a figure, so every number a
user gives is read here: plain decimal digits, an optional sign, point and exponent, with blanks
around allowed and nothing else.

``share`` reads a minimum match (``--min-match``, the API's ``min-match``) for the CLI and the
HTTP API alike.

Light on purpose (the standard library only): the CLI's option parsing imports it.
"""

from __future__ import annotations

import math
import re

from askalike.core.errors import UserError

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SHARE = re.compile(r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))\s*(?P<percent>%)?")


def decimal(text: str) -> float | None:
    """``text`` as a finite decimal number (``0.5``, ``-3``, ``1e-5``); None when it is not one."""
    stripped = text.strip()
    if not _DECIMAL.fullmatch(stripped):
        return None
    value = float(stripped)
    return value if math.isfinite(value) else None


def integer(text: str) -> int | None:
    """``text`` as a whole number written in decimal digits (``12``, ``-3``); None otherwise."""
    stripped = text.strip()
    return int(stripped) if _INTEGER.fullmatch(stripped) else None


class ShareError(UserError):
    """A minimum match that is not a share of 100%."""


def share(text: str, name: str = "--min-match", zero_allowed: bool = True) -> float:
    """A minimum match as a fraction from 0 to 1. ``70%`` is a percentage (0% to 100%); a number
    without ``%`` is the fraction itself (``0.7``; ``1`` and ``1.0`` are 100%). A number above 1
    without ``%`` is refused, not guessed at: ``50`` may mean 50% or be a slip for ``0.50``.
    ``name`` is the option or parameter the errors name."""
    match = _SHARE.fullmatch(text.strip())
    if match is None:
        raise ShareError(f"{name} {text!r}: not a number (give e.g. 70% or 0.7)")
    number = float(match["number"])
    if match["percent"] is None and number > 1:
        raise ShareError(f"{name} {text!r}: a number without % is a fraction from 0 to 1; for "
                         f"{match['number']} percent write {match['number']}%")
    fraction = number / 100 if match["percent"] else number
    if not (fraction >= 0 if zero_allowed else fraction > 0) or fraction > 1:
        lowest = "from 0" if zero_allowed else "above 0"
        raise ShareError(f"{name} {text!r}: must be {lowest} and at most 100%")
    return fraction
