"""What a server is started with: the index, the keys, the limits. One ``ServerSettings`` is
built by ``askalike serve`` and handed to every worker process as JSON in an environment
variable (``SETTINGS_ENV_VAR``), so that each worker builds the same application."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.errors import UserError

SETTINGS_ENV_VAR = "ASKALIKE_SERVE_SETTINGS"
KEYS_ENV_VAR = "ASKALIKE_API_KEYS"  # keys separated by commas or whitespace
MIN_KEY_CHARS = 16


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
    """The keys that may write (and read, with ``read_needs_key``): each line of the key file
    (blank lines and ``#`` comments left out) and each of $ASKALIKE_API_KEYS. A key shorter than
    MIN_KEY_CHARS is refused: it could be guessed."""
    keys = os.environ.get(KEYS_ENV_VAR, "").replace(",", " ").split()
    if settings.keys_file:
        try:
            text = Path(settings.keys_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ServerConfigError(f"{settings.keys_file}: cannot read the API key file "
                                    f"({getattr(err, 'strerror', None) or err})") from None
        keys += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    short = sum(len(key) < MIN_KEY_CHARS for key in keys)
    if short:
        raise ServerConfigError(f"{short} API key(s) shorter than {MIN_KEY_CHARS} characters: use "
                                "long random keys (e.g. `python -c 'import secrets; "
                                "print(secrets.token_urlsafe(32))'`)")
    return keys
