"""Distillation from a teacher encoder (e.g. all-MiniLM-L6-v2) into a fast student.

The teacher embeds a seeded sample of the training texts once; its vectors are cached in the
run directory in chunks, so that an interrupted run resumes the teacher pass where it stopped.
The student learns to pick its own sentence's teacher vector among the batch's (softmax over
scaled cosines) and to point where the teacher points (1 - cosine).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from rich.progress import Progress
from torch.nn import functional as F

from train.batching import text_key
from train.files import atomic_write

CHUNK = 2048  # texts per cached teacher chunk
TEACHER_MAX_LENGTH = 128  # word pieces; the students read at most 64 words


def distillation_texts(texts: Sequence[str], limit: int, seed: int) -> list[str]:
    """Up to ``limit`` distinct texts, drawn from a seeded shuffle of ``texts``."""
    order = np.random.default_rng([seed, 2]).permutation(len(texts))
    chosen: dict[str, str] = {}
    for index in order:
        text = texts[index]
        key = text_key(text)
        if key and key not in chosen:
            chosen[key] = text
            if len(chosen) == limit:
                break
    return list(chosen.values())


def _chunk_path(cache_dir: Path, teacher: str, start: int, texts: Sequence[str]) -> Path:
    """A chunk's file, named by its position and a hash of the teacher and its texts: a cache
    survives a longer or shorter sample of the same texts, and never serves other texts."""
    digest = hashlib.sha256(teacher.encode("utf-8") + b"\0")
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return cache_dir / f"chunk-{start:08d}-{digest.hexdigest()[:16]}.npy"


def teacher_vectors(teacher: str, texts: Sequence[str], cache_dir: Path,
                    show_progress: bool = True) -> np.ndarray:
    """The teacher's L2-normalised embeddings of ``texts``, shape (len(texts), teacher dim),
    computed chunk by chunk into ``cache_dir`` (chunks of other texts or teachers are removed)."""
    from train.trained_model import load_model  # the exact (torch) teacher; it imports the encoders

    cache_dir.mkdir(parents=True, exist_ok=True)
    paths = [_chunk_path(cache_dir, teacher, start, texts[start : start + CHUNK])
             for start in range(0, len(texts), CHUNK)]
    for stale in set(cache_dir.glob("chunk-*.npy")) - set(paths):
        stale.unlink()
    missing = [(index, path) for index, path in enumerate(paths) if not path.is_file()]
    if missing:
        encoder = load_model(teacher).encoder
        if hasattr(encoder, "max_length"):
            encoder.max_length = min(encoder.max_length, TEACHER_MAX_LENGTH)
        with Progress(disable=not show_progress) as progress:
            bar = progress.add_task(f"teacher {teacher}", total=len(paths),
                                    completed=len(paths) - len(missing))
            for index, path in missing:
                chunk = list(texts[index * CHUNK : (index + 1) * CHUNK])
                with atomic_write(path) as temporary, open(temporary, "wb") as handle:
                    np.save(handle, encoder.encode(chunk, batch_size=64).astype(np.float16))
                progress.advance(bar)
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
