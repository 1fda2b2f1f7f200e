"""The torch device a run computes on, from ``--device`` (``core.devices.Device``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from askalike.core.devices import Device, DeviceError


def torch_device(choice: Device | str = Device.auto) -> torch.device:
    """The GPU of this process (its local rank under torchrun) for ``cuda``, and for ``auto``
    where torch sees one; else the CPU. ``cuda`` where torch sees no GPU is a DeviceError."""
    choice = Device(choice)
    if choice is not Device.cpu and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if choice is Device.cuda:
        build = "a CUDA" if torch.version.cuda else "a CPU-only"
        raise DeviceError(f"--device cuda: torch sees no GPU here (torch {torch.__version__} is "
                          f"{build} build); use --device cpu or auto")
    return torch.device("cpu")


@contextlib.contextmanager
def float32_products() -> Iterator[None]:
    """Matrix products in full float32 on a GPU (no TF32) while the block runs, as the CPU
    computes them: vectors and scores comparable with the CPU path's."""
    matmul = torch.backends.cuda.matmul
    allowed, matmul.allow_tf32 = matmul.allow_tf32, False
    try:
        with torch.inference_mode():
            yield
    finally:
        matmul.allow_tf32 = allowed
