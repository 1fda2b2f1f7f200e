"""A transformer model's encoder in torch, for the runs that embed many texts on a GPU (``index``,
``eval`` with ``--device cuda``).

It computes what the model's ONNX export computes, so that vectors embedded on a GPU and on a CPU
stand side by side in one index: the same tokenizer (``core.onnx_encoder``), the weights the
export holds (``train.onnx_export.as_exported``: rounded as saved, matrices and tables read back
from their int8 values), each token's activations rounded as the export's int8 MatMuls round
them, and float32 arithmetic (TF32 off). Float rounding apart: where a value lies at a rounding
step, one side may round it up and the other down, so the two agree to a cosine of about 0.999
(0.998 at worst), as the same model in float32 and float64 does (docs/results.md). The next
batch is tokenized on a thread while one computes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from askalike.core.encoder import BatchedEncoder
from askalike.core.loader import EXPORTED_KINDS
from askalike.core.model_dir import ModelError, export_quantization, pretrained_name, read_model_config
from askalike.core.onnx_encoder import Tokenize, directory_tokenizer, pretrained_tokenizer
from askalike.train.devices import float32_products
from askalike.train.modules import EncoderModule
from askalike.train.onnx_export import QUANTIZATIONS, as_exported
from askalike.train.trained_model import load_model


class TorchEncoder(BatchedEncoder):
    max_batch = 512  # a GPU's matrix units stay busy; texts are length-sorted, so little padding

    def __init__(self, kind: str, module: EncoderModule, tokenize: Tokenize, device: torch.device) -> None:
        self.kind, self.dim, self.tokenize, self.device = kind, module.dim, tokenize, device
        self.module = module.to(device).eval()

    @classmethod
    def of_model(cls, spec: str | Path, device: torch.device) -> TorchEncoder:
        """The encoder of a transformer model directory or ``pretrained:NAME`` peer on ``device``,
        computing what its ONNX export computes (a peer's export is its own fp32 model)."""
        name = pretrained_name(spec)
        if name is not None:
            module = as_exported(load_model(spec).encoder, "float32", "none")
            return cls("pretrained", module, pretrained_tokenizer(name), device)
        directory = Path(spec)
        config = read_model_config(directory)
        if config["kind"] not in EXPORTED_KINDS:
            raise ModelError(f"{directory}: a {config['kind']} model runs in numpy, not in torch")
        quantization = export_quantization(directory)
        if quantization not in (*QUANTIZATIONS, "none"):  # an export this askalike cannot mirror
            raise ModelError(f"{directory}: its ONNX export ({quantization}) was written by an older "
                             f"askalike; run `askalike export {directory}` to write it anew")
        module = as_exported(load_model(directory).encoder, config.get("dtype", "float32"), quantization)
        return cls(config["kind"], module, directory_tokenizer(directory, config), device)

    def knows_words(self, text: str) -> bool:
        return self.tokenize.knows_words(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._compute(self.tokenize(texts))

    def embed_batches(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        with ThreadPoolExecutor(max_workers=1) as tokenizer:
            pending = None
            for texts in batches:
                ahead = tokenizer.submit(self.tokenize, texts)
                if pending is not None:
                    yield self._compute(pending.result())
                pending = ahead
            if pending is not None:
                yield self._compute(pending.result())

    def _compute(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        batch = {name: torch.from_numpy(ids).to(self.device, non_blocking=True)
                 for name, ids in arrays.items() if name != "bigrams"}  # hashed bigrams: only the DAN's
        with float32_products():
            return self.module(batch).float().cpu().numpy()
