"""Which source a file is, as its user would say.

A source is stored under the absolute path of its file. The same file reached by another path (a
hard link, a bind mount) is one source: a run takes each file once, and a path that reaches the
file of a stored source is indexed under that source's name. Whether two paths are one file is
asked of the file system when the run starts (device and inode of both, ``os.path.samefile``), not
remembered: an inode that a deleted file freed may be reused by a new one.

A copy of an indexed file is another file, and both are indexed; a run says so when a new source
has the file name of a stored one that already holds at least half of its questions with the
same id and text, and how to keep one. Other ids that two sources share are reported too (``askalike
delete ID`` then needs ``--source``), except between sources whose ids are line numbers (``.txt``),
which always share them.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from askalike.core.datasets import DataError
from askalike.indexer.sources import (
    SOURCE_CHARS,
    SourceFile,
    SourceQuestion,
    require_regular_file,
    source_format,
)
from askalike.indexer.store import Store

EXAMPLES = 3  # shared ids named in a warning


def source_name(path: Path) -> str:
    """How a source file is known in the store: its absolute path (``is_file_source``)."""
    name = str(path.resolve())
    if len(name) > SOURCE_CHARS:
        raise DataError(path, f"the absolute path has {len(name)} characters, the index keeps at "
                              f"most {SOURCE_CHARS}: move or link the file to a shorter path")
    return name


def is_file_source(name: str) -> bool:
    """Is the stored source ``name`` a file (an absolute path), which index runs read and
    ``--prune`` tidies? Else it holds the questions that programs wrote through the HTTP API
    (``api``, or a name they gave): no file has them, and index runs leave them alone."""
    return Path(name).is_absolute()


def source_labels(names: Iterable[str]) -> dict[str, str]:
    """How each of the sources ``names`` is named to a person: by the end of its name, as few of
    its parts as tell it from every other (a file by its file name, ``a/c200.csv`` and
    ``b/c200.csv`` where two folders hold a ``c200.csv``; an API source by its name). A label
    picks its source alone as ``--source`` and ``?source=`` match (the whole name, or its end
    after a ``/``)."""
    parts = {name: name.split("/") for name in names}
    ends: dict[str, int] = {}  # each name's ends (1, 2... parts), by how many names end so
    for split in parts.values():
        for depth in range(1, len(split) + 1):
            end = "/".join(split[-depth:])
            ends[end] = ends.get(end, 0) + 1
    return {name: next((end for depth in range(1, len(split) + 1)
                        if ends[end := "/".join(split[-depth:])] == 1), name)
            for name, split in parts.items()}


def distinct_sources(sources: Sequence[Path]) -> list[tuple[str, Path]]:
    """(source name, path) of each source, each a regular file; one file named twice (by any
    path, or by a hard link) is refused."""
    named: dict[tuple[int, int], Path] = {}
    distinct: list[tuple[str, Path]] = []
    for path in sources:
        status = require_regular_file(path)
        identity = (status.st_dev, status.st_ino)
        if identity in named:
            raise DataError(path, f"the same file as {named[identity]}: name each source once")
        named[identity] = path
        distinct.append((source_name(path), path))
    return distinct


def _same_file(stored: str, path: Path) -> bool:
    try:
        return os.path.samefile(stored, path)
    except (OSError, ValueError):  # gone, unreadable, or not a path here
        return False


def aliased(files: list[tuple[str, SourceFile]], stored: Collection[str],
            warnings: list[str]) -> list[tuple[str, SourceFile]]:
    """``files`` with a path that reaches a stored source's file named as that source."""
    renamed = []
    for name, source in files:
        if name not in stored:
            twin = next((other for other in stored
                         if is_file_source(other) and _same_file(other, source.path)), None)
            if twin is not None:
                warnings.append(f"{name} is the same file as {twin} (a hard link, or another path "
                                "to it), which is indexed: its questions are kept as that source's")
                name = twin
        renamed.append((name, source))
    return renamed


def _own_ids(name: str) -> bool:
    """Are the source's ids its user's (not line numbers)? Those written through the API are."""
    return not is_file_source(name) or source_format(Path(name)) != ".txt"


@dataclass
class _Shared:
    """The ids one source shares with another."""

    count: int = 0
    same_text: int = 0  # of them, with the same text too
    examples: list[str] = field(default_factory=list)

    def add(self, external_id: str, same_text: bool) -> None:
        self.count += 1
        self.same_text += same_text
        if len(self.examples) < EXAMPLES:
            self.examples.append(external_id)


class Overlaps:
    """The ids a run's sources share with each other and with stored sources, gathered chunk by
    chunk as the run's first pass reads them (``add``), and the warnings they give."""

    def __init__(self, store: Store | None, names: Sequence[str], stored: Collection[str]) -> None:
        self._store = store
        self._stored = set(stored)
        run = set(names)
        self._others = [name for name in stored if name not in run]
        self._shared: dict[tuple[str, str], _Shared] = {}

    def _compared_with(self, name: str) -> list[str]:
        """The stored sources a run source is compared with: those of the same file name (a
        copy?), and, when its ids are its user's, every other one whose ids are too."""
        file_name = Path(name).name
        return [other for other in self._others if Path(other).name == file_name
                or (_own_ids(name) and _own_ids(other))]

    def add(self, name: str, questions: Sequence[SourceQuestion]) -> None:
        if self._store is None:
            return
        hashes = {q.external_id: q.content_hash for q in questions}
        shared = self._store.shared_ids(list(hashes), self._compared_with(name))
        for other, external_id, content_hash in shared:
            entry = self._shared.setdefault((name, other), _Shared())
            entry.add(external_id, hashes[external_id] == content_hash)

    def warnings(self, files: Sequence[tuple[str, SourceFile]]) -> list[str]:
        sizes = {name: len(source.ids) for name, source in files}
        said = [self._said(name, other, shared, sizes[name])
                for (name, other), shared in self._shared.items()]
        return [text for text in said if text] + _shared_in_run(files)

    def _said(self, name: str, other: str, shared: _Shared, size: int) -> str | None:
        if (name not in self._stored and Path(name).name == Path(other).name
                and 2 * shared.same_text >= size):
            return (f"{name}: {shared.same_text} of its {size} questions have the ids and texts of "
                    f"{other}'s, which is indexed (a copy of that file?): indexing both keeps those "
                    "questions twice; to keep one file's, run `askalike index` with the sources to keep "
                    "and --prune")
        return _shared_ids_warning(name, other, shared.count, shared.examples)


def _shared_ids_warning(name: str, other: str, count: int, examples: list[str]) -> str | None:
    if not (count and _own_ids(name) and _own_ids(other)):
        return None
    return (f"{name}: {count} ids are also ids of {other} (e.g. {', '.join(map(repr, examples))}): "
            "`askalike delete` needs --source to tell them apart")


def _shared_in_run(files: Sequence[tuple[str, SourceFile]]) -> list[str]:
    """The warnings for ids that two of the run's sources share."""
    said = []
    for position, (name, source) in enumerate(files):
        for earlier, earlier_source in files[:position]:
            common = [external_id for external_id in source.ids if external_id in earlier_source.ids]
            said.append(_shared_ids_warning(name, earlier, len(common), common[:EXAMPLES]))
    return [text for text in said if text]
