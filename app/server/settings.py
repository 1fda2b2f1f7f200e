"""What a server is started with: the index, the keys, the limits. One ``ServerSettings`` is
built by ``askalike serve`` and handed to every worker process as JSON in an environment
variable (``SETTINGS_ENV_VAR``), so that each worker builds the same application."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from askalike.core.errors import UserError

SETTINGS_ENV_VAR = "ASKALIKE_SERVE_SETTINGS"
KEYS_ENV_VAR = "ASKALIKE_API_KEYS"  # keys separated by commas or whitespace
MIN_KEY_CHARS = 16
_KEY = re.compile(r"[!-~]+")  # visible ASCII: what an Authorization header carries


class ServerConfigError(UserError):
    """A server that cannot start as asked (no index, an unreadable key file, a short key)."""


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; more is refused with a 4xx and a one-line message."""

    body_bytes: int = 1 << 20  # a request body
    query_chars: int = 1000  # a query or a text to compare
    k: int = 100  # results per search
    batch: int = 100  # queries in a POST /search, questions in a POST /questions
    lock_wait_s: float = 10.0  # how long a write waits for an index run's writer lock


@dataclass(frozen=True)
class ServerSettings:
    index_dir: str
    database: str | None = None
    model: str | None = None  # None: the index's own model
    keys_file: str | None = None  # one key a line; keys from $ASKALIKE_API_KEYS are added
    read_needs_key: bool = False  # searches and reads too need a key (writes always do)
    cors_origins: tuple[str, ...] = ()  # none: no CORS headers (browsers allow same origin only)
    limits: Limits = field(default_factory=Limits)
    # load the index before taking connections (serve --workers N > 1): the workers share one
    # socket, so that none of them is handed a request while it still loads; a lone worker loads
    # in the background instead, so that /health answers at once
    load_before_accepting: bool = False

    def to_environment(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_environment(cls) -> ServerSettings:
        values = json.loads(os.environ[SETTINGS_ENV_VAR])
        return cls(**{**values, "cors_origins": tuple(values["cors_origins"]),
                      "limits": Limits(**values["limits"])})


def api_keys(settings: ServerSettings) -> list[str]:
    """The keys that may write (and read, with ``read_needs_key``): those of the key file
    (``read_key_file``) and each of $ASKALIKE_API_KEYS. A key shorter than MIN_KEY_CHARS is
    refused: it could be guessed."""
    keys = os.environ.get(KEYS_ENV_VAR, "").replace(",", " ").split()
    if settings.keys_file:
        keys += read_key_file(Path(settings.keys_file))
    short = sum(len(key) < MIN_KEY_CHARS for key in keys)
    if short:
        raise ServerConfigError(f"{short} API key(s) shorter than {MIN_KEY_CHARS} characters: use "
                                "long random keys (e.g. `python -c 'import secrets; "
                                "print(secrets.token_urlsafe(32))'`)")
    return keys


def read_key_file(path: Path) -> list[str]:
    """The keys of a key file, one a line, read strictly: a blank line is skipped and a line
    that starts with ``#`` is a comment; any other line is a key, and must be one: visible
    ASCII characters, no blank in it or around it. A line that is neither (an indented comment,
    a key with a space) is refused naming its line, never its text, rather than taken for a key
    nobody meant."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ServerConfigError(f"{path}: cannot read the API key file "
                                f"({getattr(err, 'strerror', None) or err})") from None
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        if not _KEY.fullmatch(line):
            what = ("looks like a comment but does not start with #" if line.lstrip().startswith("#")
                    else "holds a blank or a character that is not visible ASCII")
            raise ServerConfigError(f"{path}:{number}: {what}: a line is a key (visible ASCII, no "
                                    "blanks), a comment starting with # or blank")
        keys.append(line)
    return keys
