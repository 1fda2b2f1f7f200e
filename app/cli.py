"""The ``askalike`` command line: a thin layer over the library packages."""

from app import eval_commands, index_commands, search_commands, train_command  # noqa: F401 (register)
from app.common import app

__all__ = ["app", "main"]


def main() -> None:
    app()
