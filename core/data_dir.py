"""Where the datasets are (the directory, the CQA splits' files), and the error for a dataset
file that is missing or malformed.

Light on purpose (no numpy): the CLI reads the option's environment variable at start-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from askalike.core.errors import UserError

DATA_ENV_VAR = "ASKALIKE_DATA"
_CHECKOUT = Path(__file__).resolve().parent.parent  # the data lie in ../shared/data beside it


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
