"""Sentence encoders behind one interface: texts in, L2-normalised float32 vectors out.

- DAN (Yang et al. 2018, 2.3.1): word + bigram embeddings summed, divided by sqrt(n), then a
  feed-forward stack (optionally with a residual tanh branch beside it).
- Transformer (2.3.2): encoder-only self-attention with a sinusoidal timing signal, mean over
  non-padding positions.
- CSE (Jiao et al. 2018, 3.1): convolutions of widths 1, 2, 3 with linear activation, sum pooled.
- Pretrained: a transformer checkpoint from local files with mean pooling (all-MiniLM-L6-v2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from askalike.core.text import PAD, Vocabulary


def tanh_feed_forward(width: int, hidden: int, out: int, zero_start: bool = False) -> nn.Sequential:
    """W2 tanh(W1 x). ``zero_start``: W2 and its bias start at zero, so that as a residual branch
    it adds nothing until trained and the model it is added to starts where it was."""
    branch = nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, out))
    if zero_start:
        nn.init.zeros_(branch[2].weight)
        nn.init.zeros_(branch[2].bias)
    return branch


class EncoderModule(nn.Module):
    """Base class: subclasses turn texts into tensors (``tokenize``) and tensors into vectors."""

    kind: str = ""
    dim: int

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """Constructor arguments, saved as config.json (the vocabulary is saved apart)."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Unnormalised embeddings with gradients, for training."""
        batch = {name: tensor.to(self.device) for name, tensor in self.tokenize(texts).items()}
        return self(batch)

    def encode(self, texts: Sequence[str], batch_size: int = 256,
               normalize: bool = True) -> np.ndarray:
        """Float32 embeddings, shape (len(texts), dim), L2-normalised unless told otherwise
        (the trained heads work on unnormalised ones). Texts are batched by length so that
        little time goes to padding."""
        result = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                for start in range(0, len(order), batch_size):
                    chunk = order[start : start + batch_size]
                    vectors = self.embed([texts[i] for i in chunk]).float()
                    if normalize:
                        vectors = F.normalize(vectors, dim=-1)
                    result[chunk] = vectors.cpu().numpy()
        finally:
            self.train(was_training)
        return result


class VocabularyModule(EncoderModule):
    """An encoder trained from scratch over the project's own vocabulary."""

    def __init__(self, vocabulary: Vocabulary, max_length: int) -> None:
        super().__init__()
        self.vocabulary = vocabulary
        self.max_length = max_length

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return {name: torch.from_numpy(ids) for name, ids in
                self.vocabulary.encode(texts, self.max_length).items()}

    words: nn.Embedding  # every vocabulary encoder embeds its words in ``self.words``

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.words


class DanModule(VocabularyModule):
    """``residual_hidden`` > 0 adds a tanh branch of that width from the pooled embedding to the
    output, beside the feed-forward stack: it lets a one-layer (linear) DAN model interactions
    between words while a teacher-initialised DAN still starts as its static distillation."""

    kind = "dan"

    def __init__(self, vocabulary: Vocabulary, embedding_dim: int = 300,
                 hidden: Sequence[int] = (300, 300, 500), max_length: int = 64,
                 dropout: float = 0.0, residual_hidden: int = 0) -> None:
        super().__init__(vocabulary, max_length)
        self.embedding_dim, self.hidden, self.dropout = embedding_dim, tuple(hidden), dropout
        self.residual_hidden = residual_hidden
        self.words = nn.Embedding(vocabulary.word_count, embedding_dim, padding_idx=PAD)
        self.bigrams = (nn.Embedding(vocabulary.bigram_count, embedding_dim, padding_idx=PAD)
                        if vocabulary.bigram_buckets else None)
        layers: list[nn.Module] = []
        width = embedding_dim
        for i, size in enumerate(self.hidden):
            layers += [nn.Dropout(dropout), nn.Linear(width, size)]
            if i < len(self.hidden) - 1:
                layers.append(nn.Tanh())
            width = size
        self.feed_forward = nn.Sequential(*layers)
        self.residual = (tanh_feed_forward(embedding_dim, residual_hidden, width, zero_start=True)
                         if residual_hidden else None)
        self.dim = width

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        words = batch["words"]
        total = self.words(words).sum(dim=1)
        count = (words != PAD).sum(dim=1)
        if self.bigrams is not None:
            bigrams = batch["bigrams"]
            total = total + self.bigrams(bigrams).sum(dim=1)
            count = count + (bigrams != PAD).sum(dim=1)
        combined = total / count.clamp(min=1).unsqueeze(-1).float().sqrt()
        output = self.feed_forward(combined)
        if self.residual is not None:
            output = output + self.residual(combined)
        return output

    def config(self) -> dict[str, Any]:
        config = {"embedding_dim": self.embedding_dim, "hidden": list(self.hidden),
                  "max_length": self.max_length, "dropout": self.dropout}
        if self.residual_hidden:
            config["residual_hidden"] = self.residual_hidden
        return config


def timing_signal(length: int, channels: int) -> torch.Tensor:
    """The sinusoidal position signal of Vaswani et al. 2017, shape (length, channels)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    rates = torch.exp(torch.arange(0, channels, 2, dtype=torch.float32)
                      * (-math.log(10000.0) / channels))
    signal = torch.zeros(length, channels)
    signal[:, 0::2] = torch.sin(position * rates)
    signal[:, 1::2] = torch.cos(position * rates[: channels // 2])
    return signal


class TransformerModule(VocabularyModule):
    kind = "transformer"

    def __init__(self, vocabulary: Vocabulary, hidden: int = 512, layers: int = 6, heads: int = 8,
                 filter_size: int = 2048, max_length: int = 64, dropout: float = 0.1) -> None:
        super().__init__(vocabulary, max_length)
        self.hidden, self.layers, self.heads = hidden, layers, heads
        self.filter_size, self.dropout = filter_size, dropout
        self.words = nn.Embedding(vocabulary.word_count, hidden, padding_idx=PAD)
        # unit variance after the sqrt(hidden) scaling of forward(), as in Vaswani et al.
        nn.init.normal_(self.words.weight, std=hidden**-0.5)
        with torch.no_grad():
            self.words.weight[PAD].zero_()
        self.register_buffer("timing", timing_signal(max_length, hidden), persistent=False)
        layer = nn.TransformerEncoderLayer(hidden, heads, filter_size, dropout, batch_first=True,
                                           norm_first=True)
        # a pre-norm stack needs a final LayerNorm, else the residual stream's scale is unbounded
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(hidden),
                                             enable_nested_tensor=False)
        self.dim = hidden

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        words = batch["words"]
        padding = words == PAD
        x = self.words(words) * math.sqrt(self.hidden) + self.timing[: words.shape[1]]
        x = self.encoder(x, src_key_padding_mask=padding)
        keep = (~padding).unsqueeze(-1).float()
        return (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)

    def config(self) -> dict[str, Any]:
        return {"hidden": self.hidden, "layers": self.layers, "heads": self.heads,
                "filter_size": self.filter_size, "max_length": self.max_length,
                "dropout": self.dropout}


class CseModule(VocabularyModule):
    """Wide convolutions (zero-padded by width-1 on both sides) so every n-gram of a sentence,
    however short, is seen; positions beyond the sentence are masked before sum pooling, so
    batch padding never changes an embedding. The convolutions have no bias: under sum pooling
    a bias only adds a length-proportional vector common to all sentences, which dominates
    their cosines."""

    kind = "cse"

    def __init__(self, vocabulary: Vocabulary, embedding_dim: int = 300,
                 widths: Sequence[int] = (1, 2, 3), maps: int = 100, max_length: int = 64) -> None:
        super().__init__(vocabulary, max_length)
        self.embedding_dim, self.widths, self.maps = embedding_dim, tuple(widths), maps
        self.words = nn.Embedding(vocabulary.word_count, embedding_dim, padding_idx=PAD)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(embedding_dim, maps, width, padding=width - 1, bias=False)
            for width in self.widths)
        self.dim = maps * len(self.widths)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        words = batch["words"]
        lengths = (words != PAD).sum(dim=1, keepdim=True)
        x = self.words(words).transpose(1, 2)  # (B, D, L)
        pooled = []
        for width, convolution in zip(self.widths, self.convolutions, strict=True):
            features = convolution(x)  # (B, maps, L + width - 1), linear activation
            positions = torch.arange(features.shape[2], device=words.device).unsqueeze(0)
            valid = (positions < lengths + width - 1).unsqueeze(1).float()
            pooled.append((features * valid).sum(dim=2))
        return torch.cat(pooled, dim=1)

    def config(self) -> dict[str, Any]:
        return {"embedding_dim": self.embedding_dim, "widths": list(self.widths),
                "maps": self.maps, "max_length": self.max_length}


class PretrainedModule(EncoderModule):
    """A Hugging Face transformer checkpoint read from a local directory, mean pooled."""

    kind = "pretrained"

    def __init__(self, checkpoint: Path | str, max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer  # heavy import, only when used
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()
        super().__init__()
        self.checkpoint = str(checkpoint)
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(self.checkpoint, local_files_only=True)
        self.transformer = AutoModel.from_pretrained(self.checkpoint, local_files_only=True).float()
        self.dim = self.transformer.config.hidden_size

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return dict(self.tokenizer(list(texts), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt"))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.transformer(**batch).last_hidden_state
        keep = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1e-9)

    def config(self) -> dict[str, Any]:
        return {"max_length": self.max_length}


VOCABULARY_MODULES: dict[str, type[VocabularyModule]] = {
    cls.kind: cls for cls in (DanModule, TransformerModule, CseModule)
}
