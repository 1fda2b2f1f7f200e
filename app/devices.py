"""``--device``: where the commands that embed or group many questions compute (``index``,
``duplicates``, ``tune``, ``eval``). torch is imported only where a GPU may be used (an NVIDIA
driver is loaded, or ``cuda`` is asked), so a CPU machine starts as fast as before."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from askalike.app.model_specs import with_onnx_export
from askalike.core.devices import Device, gpu_possible
from askalike.core.extras import missing_training_modules, require_training

if TYPE_CHECKING:
    import torch

    from askalike.core.encoder import Encoder
    from askalike.indexer.directory import OpenIndex
    from askalike.retrieval.collection_duplicates import NeighbourSearch

DeviceOption = Annotated[Device, typer.Option(
    "--device", help="Where to compute: auto (a GPU where torch sees one, else the CPU), cpu or "
                     "cuda. On a GPU a transformer embeds in torch with the math of its ONNX export, "
                     "so its vectors stand beside the CPU's in one index.")]


def gpu_device(device: Device) -> torch.device | None:
    """The GPU that ``device`` names or ``auto`` finds; None for the CPU. ``cuda`` without the
    training extra (torch) is a TrainingExtraError, without a GPU torch can see a DeviceError."""
    if not gpu_possible(device) or (device is Device.auto and missing_training_modules()):
        return None  # without the training extra, auto is the CPU
    require_training("--device cuda")
    from askalike.train.devices import torch_device

    chosen = torch_device(device)
    return chosen if chosen.type == "cuda" else None


def embedding_encoder(spec: str, device: Device, threads: int | None = None) -> Encoder:
    """The encoder that embeds many texts with model ``spec``: on a GPU a transformer runs in
    torch (``train.torch_encoder``); elsewhere, and for a model that runs in numpy (a DAN, for
    which ``cuda`` is only checked), the encoder every query uses (``core.loader``)."""
    from askalike.core.loader import EXPORTED_KINDS, load_encoder
    from askalike.core.model_dir import pretrained_name, read_model_config

    spec = with_onnx_export(spec)
    transformer = pretrained_name(spec) is not None or read_model_config(Path(spec))["kind"] in EXPORTED_KINDS
    gpu = gpu_device(device) if transformer or device is Device.cuda else None
    if gpu is None or not transformer:
        return load_encoder(spec, threads=threads)
    from askalike.train.torch_encoder import TorchEncoder

    return TorchEncoder.of_model(spec, gpu)


def neighbour_search(index: OpenIndex, device: Device) -> NeighbourSearch:
    """What finds each question's nearest neighbours for ``duplicates``: the index's FAISS index
    copied to a GPU where FAISS has GPU support (the extra ``gpu``), else an exact search over
    the stored vectors in torch on a GPU, else the index's own FAISS index on the CPU."""
    if not gpu_possible(device):
        return index.faiss
    if (on_gpu := index.faiss.on_gpu()) is not None:
        return on_gpu
    gpu = gpu_device(device)
    if gpu is None:
        return index.faiss
    from askalike.train.gpu_search import ExactSearch

    return ExactSearch.of_chunks(index.store.vectors(index.manifest.encoder.dim), gpu)
