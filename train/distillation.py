"""Distillation from a teacher encoder (e.g. models/accurate) into a fast student.

The teacher embeds a seeded sample of the training texts once; its vectors are cached in the
run directory in fp16 chunks, so that an interrupted run resumes the teacher pass where it
stopped, and a larger sample of the same texts reuses the chunks it shares. The teacher runs on
its exact fast path: a transformer as an fp32 ONNX export (1.1-1.2x its torch speed on 2 cores,
cosine 1.0 to it), a DAN or CSE in numpy. The student learns to pick its own sentence's teacher
vector among the batch's (softmax over scaled cosines) and to point where the teacher points
(1 - cosine).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import (
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from torch.nn import functional as F

from askalike.core.data_dir import DataError
from askalike.core.encoder import Encoder
from askalike.core.files import atomic_write, write_text_atomically
from askalike.core.model_dir import ONNX_FILE
from askalike.train.batching import text_key

CHUNK = 2048  # texts per cached teacher chunk
TEACHER_MAX_LENGTH = 128  # word pieces; the students read at most 64 words


def distillation_texts(groups: Sequence[Sequence[str]], limit: int, seed: int) -> list[str]:
    """Up to ``limit`` distinct texts: each group in a seeded shuffle, the groups in their order
    (the in-domain texts before the general pool). A smaller limit gives a prefix of a larger one."""
    chosen: dict[str, str] = {}
    for number, texts in enumerate(groups):
        for index in np.random.default_rng([seed, 2, number]).permutation(len(texts)):
            text = texts[index]
            key = text_key(text)
            if key and key not in chosen:
                chosen[key] = text
                if len(chosen) == limit:
                    return list(chosen.values())
    return list(chosen.values())


def distillation_rows(count: int, in_domain: int, copies: int) -> np.ndarray:
    """The sample's rows as the distillation task sees them: every text once and the first
    ``in_domain`` texts (the in-domain group, drawn first) ``copies`` times in all, so that a
    larger general pool does not dilute the texts the model is used on."""
    return np.concatenate([np.arange(count), *[np.arange(min(in_domain, count))] * (copies - 1)])


TEXTS_FILE = "texts.json"
IN_DOMAIN_FILE = "in_domain.json"  # how many of the sample's first texts are in-domain


def write_distillation_texts(cache_dir: Path, texts: Sequence[str], in_domain: int) -> None:
    """Record the sample beside its teacher vectors, so that a later stage can reuse both."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomically(cache_dir / TEXTS_FILE, json.dumps(list(texts), ensure_ascii=False))
    write_text_atomically(cache_dir / IN_DOMAIN_FILE, json.dumps({"in_domain": in_domain}))


def read_in_domain_count(cache_dir: Path) -> int:
    """How many of an earlier run's sampled texts are in-domain (written with its sample)."""
    path = cache_dir / IN_DOMAIN_FILE
    try:
        count = json.loads(path.read_text(encoding="utf-8"))["in_domain"]
    except FileNotFoundError:
        raise DataError(path, "not found: the run that drew this sample predates it; rerun its "
                        "teacher stage (cached teacher vectors are reused)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise DataError(path, f"not a JSON object with an in_domain count ({err})") from None
    if not isinstance(count, int) or count < 0:
        raise DataError(path, f"in_domain = {count!r} must be a count")
    return count


def read_distillation_texts(cache_dir: Path) -> list[str]:
    path = cache_dir / TEXTS_FILE
    try:
        texts = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path, "not found: run the stage that draws the distillation texts first") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(path, f"not a JSON list of texts ({err})") from None
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise DataError(path, "not a JSON list of texts")
    return texts


def _chunk_path(cache_dir: Path, prefix: str, teacher: str, start: int, texts: Sequence[str]) -> Path:
    """A chunk's file, named by its position and a hash of the teacher and its texts: a cache
    survives a longer or shorter sample of the same texts, and never serves other texts."""
    digest = hashlib.sha256(teacher.encode("utf-8") + b"\0")
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return cache_dir / f"{prefix}-{start:08d}-{digest.hexdigest()[:16]}.npy"


def _chunk_start(path: Path) -> int:
    return int(path.name.split("-")[-2])


def exact_teacher(teacher: str, cache_dir: Path) -> Encoder:
    """The teacher's fastest exact encoder: a transformer exported to fp32 ONNX once into
    ``cache_dir`` (reading at most TEACHER_MAX_LENGTH word pieces), else its numpy encoder."""
    from askalike.core.loader import EXPORTED_KINDS, load_encoder
    from askalike.core.model_dir import PRETRAINED, pretrained_name, read_model_config
    from askalike.core.onnx_encoder import OnnxEncoder, SubwordTokenizer, Tokenize, VocabularyTokenizer

    name = pretrained_name(teacher)
    kind = "pretrained" if name is not None else read_model_config(Path(teacher))["kind"]
    if kind not in EXPORTED_KINDS:
        return load_encoder(teacher)
    export_dir = cache_dir / "teacher-fp32"
    if not (export_dir / ONNX_FILE).is_file():
        from askalike.train.onnx_export import export_onnx
        from askalike.train.trained_model import load_model

        export_dir.mkdir(parents=True, exist_ok=True)
        dtype = "float32" if name is not None else read_model_config(Path(teacher))["dtype"]
        export_onnx(load_model(teacher).encoder, export_dir, weight_dtype=dtype, quantize=False)
    if kind == "pretrained":
        backbone = PRETRAINED[name]() if name is not None else Path(teacher) / "backbone"
        tokenize: Tokenize = SubwordTokenizer(backbone, TEACHER_MAX_LENGTH)
    else:
        tokenize = VocabularyTokenizer(Path(teacher), TEACHER_MAX_LENGTH)
    return OnnxEncoder(kind, export_dir / ONNX_FILE, tokenize, threads=None)


def teacher_vectors(teacher: str, texts: Sequence[str], cache_dir: Path, prefix: str = "chunk",
                    show_progress: bool = True) -> np.ndarray:
    """The teacher's L2-normalised embeddings of ``texts``, shape (len(texts), teacher dim),
    computed chunk by chunk into ``cache_dir`` as ``PREFIX-START-HASH.npy`` (one prefix per list
    of texts). Chunks of other texts at the same positions are removed; chunks past the end are
    kept for a later, larger sample."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    paths = [_chunk_path(cache_dir, prefix, teacher, start, texts[start : start + CHUNK])
             for start in range(0, len(texts), CHUNK)]
    for stale in set(cache_dir.glob(f"{prefix}-*.npy")) - set(paths):
        if _chunk_start(stale) < len(texts):
            stale.unlink()
    missing = [(index, path) for index, path in enumerate(paths) if not path.is_file()]
    if missing:
        encoder = exact_teacher(teacher, cache_dir)
        columns = (*Progress.get_default_columns()[:-1], MofNCompleteColumn(), TextColumn("texts"),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), disable=not show_progress) as progress:
            done = len(texts) - sum(len(texts[i * CHUNK : (i + 1) * CHUNK]) for i, _ in missing)
            bar = progress.add_task(f"teacher {teacher}", total=len(texts), completed=done)
            for index, path in missing:
                chunk = list(texts[index * CHUNK : (index + 1) * CHUNK])
                with atomic_write(path) as temporary, open(temporary, "wb") as handle:
                    np.save(handle, encoder.encode(chunk).astype(np.float16))
                progress.advance(bar, len(chunk))
    return np.concatenate([np.load(path) for path in paths]).astype(np.float32)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, scale: float) -> torch.Tensor:
    """Cross-entropy of matching each student vector to its own teacher vector among the
    batch's (scaled cosines), plus the mean cosine distance to it."""
    student = F.normalize(student, dim=-1)
    teacher = F.normalize(teacher.to(student.dtype), dim=-1)
    if student.shape[1] != teacher.shape[1]:
        raise ValueError(f"the student has {student.shape[1]} dimensions, the teacher "
                         f"{teacher.shape[1]}: set the encoder's output size to the teacher's")
    targets = torch.arange(student.shape[0], device=student.device)
    matching = F.cross_entropy(scale * student @ teacher.T, targets)
    return matching + (1 - (student * teacher).sum(dim=-1)).mean()
