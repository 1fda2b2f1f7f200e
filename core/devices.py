"""Light: where a command that embeds or groups many questions computes (``--device``).

``auto`` takes a GPU only where one can work: an NVIDIA driver is loaded (checked without
importing torch, so that CPU machines start as fast as before) and torch, the optional training
side, sees a CUDA device. The torch side of the choice is ``train.devices``.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from askalike.core.errors import UserError

NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")  # present while the kernel driver is loaded


class DeviceError(UserError):
    """A device asked for that this machine cannot compute on."""


class Device(StrEnum):
    auto = "auto"  # a GPU where torch sees one, else the CPU
    cpu = "cpu"
    cuda = "cuda"


def gpu_possible(device: Device) -> bool:
    """May ``device`` mean a GPU here? False for ``cpu``, and for ``auto`` on a machine without
    an NVIDIA driver; ``cuda`` is always tried (and refused by ``train.devices`` if it fails)."""
    return device is Device.cuda or (device is Device.auto and NVIDIA_DRIVER.exists())
