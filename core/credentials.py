"""Credentials kept out of every message: the password in a URL's user part, credentials in its
query string, and ``password=...`` pairs in a driver's connection text.

Light (standard library only): the CLI masks every error line with it. Masking does not parse a
URL the way a driver does: a typed password may hold any character (an unencoded ``@``, ``:``,
``/`` or ``?``), so the user part runs to the URL's last ``@``, and what is doubtful is hidden
rather than shown.
"""

from __future__ import annotations

import re

HIDDEN = "***"
# names whose value is a secret: password=, sslpassword=, passwd=, pwd=, token=, secret=, api_key=, ...
_SECRET_NAME = (r"[\w.-]*(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key"
                r"|credentials?)[\w.-]*")
_SECRET_PAIR = re.compile(rf"(?i)(?<![\w.-])({_SECRET_NAME})(\s*=\s*)('[^']*'?|\"[^\"]*\"?|[^\s&;,]*)")
_SCHEME = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://")


def _masked_pairs(text: str) -> str:
    return _SECRET_PAIR.sub(lambda match: f"{match[1]}{match[2]}{HIDDEN}", text)


def masked_url(url: str) -> str:
    """``url`` with its password and query-string credentials hidden
    (``postgresql://bob:***@host/db?sslpassword=***``). The user part is what comes before the
    URL's last ``@`` (after the scheme); its first ``:`` ends the user name."""
    head, at, tail = url.rpartition("@")
    if at:
        scheme = _SCHEME.match(head)
        prefix = scheme[0] if scheme else ""
        user, colon, _ = head[len(prefix):].partition(":")
        if colon:
            head = f"{prefix}{user}:{HIDDEN}"
    return _masked_pairs(head) + at + _masked_pairs(tail)


def masked_text(text: str) -> str:
    """Free text (an error message, a driver's reason) with each URL in it masked by
    ``masked_url`` (a URL runs from its scheme to the next whitespace) and every
    ``password=...``-like pair hidden."""
    pieces, end = [], 0
    for match in _SCHEME.finditer(text):
        if match.start() < end:
            continue
        stop = next((i for i in range(match.start(), len(text)) if text[i].isspace()), len(text))
        pieces += [_masked_pairs(text[end : match.start()]), masked_url(text[match.start() : stop])]
        end = stop
    return "".join(pieces) + _masked_pairs(text[end:])
