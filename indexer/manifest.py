"""An index directory's manifest: which FAISS and BM25 files are current, what they hold and how
they were built, and the verified loading of those files."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from weakref import WeakValueDictionary

import faiss

from askalike.core.files import known_sha256, write_text_atomically
from askalike.core.lexical import LexicalIndex, LexicalSegments
from askalike.core.model_dir import EncoderIdentity
from askalike.indexer.layout import (
    FAISS_FILES,
    LEXICAL_FILES,
    MANIFEST_FILE,
    REPAIR_HINT,
    IndexDirectoryError,
)
from askalike.indexer.vector_index import SegmentedIndex, configure_search, read_index

FORMAT_VERSION = 1
T = TypeVar("T")


@dataclass
class Manifest:
    encoder: EncoderIdentity
    # the database URL, password hidden; OWN_DATABASE for the index directory's own SQLite file
    # (so that the directory can be moved or copied); older manifests name it by absolute URL
    database: str
    index_type: str
    parameters: dict[str, Any]
    count: int  # vectors in the FAISS files (the main one and the added one)
    generation: int  # the store generation the FAISS files were brought up to
    faiss_file: str  # the main FAISS file, a name inside the index directory
    faiss_sha256: str
    faiss_bytes: int
    # the BM25 index of the same questions ("": none yet, an index built before lexical search)
    lexical_file: str = ""
    lexical_sha256: str = ""
    lexical_bytes: int = 0
    # the flat FAISS file of the questions added since the main file was written ("": none)
    added_file: str = ""
    added_sha256: str = ""
    added_bytes: int = 0
    # the BM25 index of the questions added since the main BM25 file was written ("": none)
    lexical_added_file: str = ""
    lexical_added_sha256: str = ""
    lexical_added_bytes: int = 0
    updated_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    format: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse and type-check a manifest; ValueError, KeyError or TypeError when it is not one."""
        values = json.loads(text)
        if not isinstance(values, dict) or not isinstance(values.get("encoder"), dict):
            raise TypeError("not a manifest object")
        values["encoder"] = _typed(EncoderIdentity, values["encoder"])
        return _typed(cls, values)


_FIELD_TYPES = {"str": str, "int": int, "dict[str, Any]": dict, "EncoderIdentity": EncoderIdentity}


def _typed(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)`` once every value has its field's type (bool is not an int here)."""
    instance = cls(**values)
    for item in fields(cls):
        value, expected = getattr(instance, item.name), _FIELD_TYPES[str(item.type)]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise TypeError(f"{item.name!r} is {type(value).__name__}, expected {expected.__name__}")
    return instance


def read_manifest(index_dir: Path) -> Manifest | None:
    path = index_dir / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = Manifest.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        raise IndexDirectoryError(f"{path}: unreadable manifest ({err}); run "
                                  f"`{REPAIR_HINT.format(dir=index_dir)}` to rebuild it from the "
                                  "database") from None
    for key in ("faiss_file", "added_file", "lexical_file", "lexical_added_file"):
        name = getattr(manifest, key)
        if Path(name).name != name:
            raise IndexDirectoryError(f"{path}: {key} {name!r} is not a file name in the index "
                                      f"directory; run `{REPAIR_HINT.format(dir=index_dir)}`")
    if manifest.format != FORMAT_VERSION:
        raise IndexDirectoryError(f"{path}: manifest format {manifest.format}, this askalike reads "
                                  f"{FORMAT_VERSION}")
    return manifest


def _verified(index_dir: Path, name: str, size: int, sha256: str) -> Path:
    """The path of a file the manifest names, once its size and sha256 match the manifest's
    (every open: a damaged file is never searched or extended; one this process wrote or read,
    whose identity and times have not changed since, is not read again, ``files.known_sha256``)."""
    path = index_dir / name
    hint = REPAIR_HINT.format(dir=index_dir)
    missing = IndexDirectoryError(f"{path}: missing; rebuild it from the database with `{hint}`")
    try:  # a writer may remove it (an earlier generation) between any two of these steps
        found = path.stat().st_size
        if found != size:
            raise IndexDirectoryError(f"{path}: {found} bytes, the manifest says {size} (truncated "
                                      f"or damaged, so its checksum cannot match); rebuild it with `{hint}`")
        digest = known_sha256(path)
    except FileNotFoundError:
        raise missing from None
    if digest != sha256:
        raise IndexDirectoryError(f"{path}: its checksum (sha256) differs from the manifest's "
                                  f"(damaged on disk); rebuild it from the database with `{hint}`")
    return path


def verified_added_faiss(index_dir: Path, manifest: Manifest) -> None:
    """Check the added FAISS file the manifest names, if any: its size and checksum must match
    (else IndexDirectoryError). The main one is checked as it is opened (``main_faiss``)."""
    if manifest.added_file:
        _verified(index_dir, manifest.added_file, manifest.added_bytes, manifest.added_sha256)


def load_faiss(index_dir: Path, manifest: Manifest, mapped: bool = False) -> SegmentedIndex:
    """The FAISS files the manifest names, verified; ``mapped`` for searching only
    (``vector_index.read_index``), the main one shared with the states this process has open
    (``_open_mains``)."""
    return SegmentedIndex(main_faiss(index_dir, manifest, mapped), _added_faiss(index_dir, manifest, mapped))


def load_faiss_to_extend(index_dir: Path, manifest: Manifest) -> SegmentedIndex:
    """The FAISS files the manifest names, verified, for a write that adds questions: the main
    one mapped and shared as a search's (such a write leaves it as it is; one that folds the
    added questions into it reads it writable, ``main_faiss``), the added one read to be
    extended. At 100,000 questions, reading the main file writable was most of a server's first
    write (0.15 s of CPU, 6 s while searches kept the cores busy), and 180 MB that each process
    that wrote kept."""
    return SegmentedIndex(main_faiss(index_dir, manifest, mapped=True),
                          _added_faiss(index_dir, manifest, mapped=False))


def main_faiss(index_dir: Path, manifest: Manifest, mapped: bool) -> faiss.Index:
    """The main FAISS file the manifest names, verified: ``mapped`` as ``load_faiss`` maps it,
    else writable."""
    def read_main() -> faiss.Index:
        return _read_faiss(index_dir, manifest.faiss_file, manifest.faiss_bytes, manifest.faiss_sha256,
                           mapped)

    main = (_open_main(index_dir / manifest.faiss_file, manifest.faiss_sha256, manifest.faiss_bytes,
                       read_main) if mapped else read_main())
    configure_search(main, manifest.parameters)  # again where shared: a searcher may have set its own
    return main


def _added_faiss(index_dir: Path, manifest: Manifest, mapped: bool) -> faiss.Index | None:
    return (_read_faiss(index_dir, manifest.added_file, manifest.added_bytes, manifest.added_sha256, mapped)
            if manifest.added_file else None)


def _read_faiss(index_dir: Path, name: str, size: int, sha256: str, mapped: bool) -> faiss.Index:
    path = _verified(index_dir, name, size, sha256)
    try:
        return read_index(path, mapped)
    except (RuntimeError, KeyError, TypeError) as err:
        raise IndexDirectoryError(f"{path}: unreadable ({str(err).splitlines()[0]}); rebuild it "
                                  f"with `{REPAIR_HINT.format(dir=index_dir)}`") from None


def verified_lexical_files(index_dir: Path, manifest: Manifest) -> tuple[Path, Path | None]:
    """The BM25 files the manifest names (the main one, the added one or None), once their
    sizes and checksums match (else IndexDirectoryError)."""
    if not manifest.lexical_file:
        raise IndexDirectoryError(f"{index_dir}: this index has no lexical (BM25) index yet; add it "
                                  f"with `{REPAIR_HINT.format(dir=index_dir)}` or by running "
                                  "`askalike index` again")
    main = _verified(index_dir, manifest.lexical_file, manifest.lexical_bytes, manifest.lexical_sha256)
    added = (_verified(index_dir, manifest.lexical_added_file, manifest.lexical_added_bytes,
                       manifest.lexical_added_sha256) if manifest.lexical_added_file else None)
    return main, added


# The main FAISS and BM25 files this process has open for searching, by file and checksum, while
# a state uses them: the state opened after a write that only added questions takes them from
# here instead of reading them again (at 100,000 questions, 50 ms of the 70 a state took to
# open: the HNSW graph, the BM25 postings and what searches compute of them). Their contents
# never change once read: a write makes new files, and a writer extends or folds indexes it read
# unmapped (``load_faiss_to_extend``)
# (but the FAISS index's default search settings: each opening sets the manifest's, a searcher
# opened with other settings, the CLI's, its own; searches pass theirs with each query).
_open_mains: WeakValueDictionary[tuple[Path, int, int, str], Any] = WeakValueDictionary()


def _main_key(path: Path, sha256: str) -> tuple[Path, int, int, str] | None:
    """``_open_mains``'s key of a main file: its path, its inode (a file repaired under the same
    name is another file, and a mapping of the damaged one must not be found for it) and its
    checksum; None where it is missing."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return path.resolve(), status.st_dev, status.st_ino, sha256


def _open_main(path: Path, sha256: str, size: int, read: Callable[[], T]) -> T:
    """What ``read`` makes of the main file ``path`` (verified there), or what it made of it
    before while that is still in use, once the file is verified as every open verifies it."""
    key = _main_key(path, sha256)
    opened = None if key is None else _open_mains.get(key)
    if opened is None:
        opened = read()  # a missing file: IndexDirectoryError
        if key is not None:
            _open_mains[key] = opened
    else:  # gone meanwhile (a writer replaced it): IndexDirectoryError, so the opening reads anew
        _verified(path.parent, path.name, size, sha256)
    return opened


def remember_lexical_main(path: Path, sha256: str, segment: LexicalIndex) -> None:
    """Note the main BM25 segment this process has just written to ``path``."""
    key = _main_key(path, sha256)
    if key is not None:
        _open_mains[key] = segment


def load_lexical(index_dir: Path, manifest: Manifest) -> LexicalSegments:
    """The BM25 index the manifest names, verified (its main segment shared as ``_open_mains``
    says)."""
    hint = REPAIR_HINT.format(dir=index_dir)
    main_path, added_path = verified_lexical_files(index_dir, manifest)
    path = main_path
    try:
        main = _open_main(main_path, manifest.lexical_sha256, manifest.lexical_bytes,
                          lambda: LexicalIndex.read(main_path))
        path = added_path or main_path
        return LexicalSegments(main, None if added_path is None else LexicalIndex.read(added_path))
    except (OSError, ValueError, KeyError) as err:
        raise IndexDirectoryError(f"{path}: unreadable ({err}); rebuild it with `{hint}`") from None


def write_manifest(index_dir: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically, then drop the FAISS and BM25 files it no longer names."""
    write_text_atomically(index_dir / MANIFEST_FILE, manifest.to_json())
    for old in [*index_dir.glob(FAISS_FILES), *index_dir.glob(LEXICAL_FILES)]:
        if old.name not in (manifest.faiss_file, manifest.added_file, manifest.lexical_file,
                            manifest.lexical_added_file):
            old.unlink(missing_ok=True)


