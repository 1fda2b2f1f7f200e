"""Transformer encoders in ONNX Runtime: the graph ``train.onnx_export`` wrote, fed by the
``tokenizers`` package (pretrained backbones) or the project's own vocabulary."""

from __future__ import annotations

import itertools
import json
import os
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from askalike.core.encoder import BatchedEncoder
from askalike.core.model_dir import ONNX_FILE, PRETRAINED, ModelError, pretrained_export_dir
from askalike.core.text import Vocabulary

PRETRAINED_MAX_LENGTH = 256  # as PretrainedModule and sentence-transformers' all-MiniLM-L6-v2


class Tokenize(Protocol):
    """Texts to the ONNX graph's id arrays, and whether the model knows any token of a text."""

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]: ...

    def knows_words(self, text: str) -> bool: ...


class SubwordTokenizer:
    """A Hugging Face fast tokenizer (tokenizer.json) as the backbone was trained with: padded
    to the longest text of a batch, truncated at ``max_length`` tokens."""

    def __init__(self, directory: Path, max_length: int) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        settings_path = directory / "tokenizer_config.json"
        settings = json.loads(settings_path.read_text()) if settings_path.is_file() else {}
        pad_token = settings.get("pad_token") or "[PAD]"
        unknown = getattr(self.tokenizer.model, "unk_token", None) or "[UNK]"  # the model's own
        self.unknown_id = self.tokenizer.token_to_id(unknown)  # None: a vocabulary without one
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding(pad_id=self.tokenizer.token_to_id(pad_token) or 0, pad_token=pad_token)

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        encodings = self.tokenizer.encode_batch(list(texts))
        return {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}

    def knows_words(self, text: str) -> bool:
        """Any token but the unknown one ([UNK]: a character outside the word-piece vocabulary)?"""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return any(token != self.unknown_id for token in ids)


class VocabularyTokenizer:
    """The project's own vocabulary (a transformer trained from scratch)."""

    def __init__(self, directory: Path, max_length: int) -> None:
        self.vocabulary, self.max_length = Vocabulary.load(directory / "vocab.json"), max_length

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        return self.vocabulary.encode(texts, self.max_length)

    def knows_words(self, text: str) -> bool:
        return self.vocabulary.knows_words(text)


def directory_tokenizer(directory: Path, config: dict[str, Any]) -> Tokenize:
    """The tokenizer of a transformer model directory (with ``config``, its config.json), as
    every encoder of it (ONNX Runtime, torch on a GPU) feeds its graph."""
    max_length = config["encoder"]["max_length"]
    return (SubwordTokenizer(directory / "backbone", max_length) if config["kind"] == "pretrained"
            else VocabularyTokenizer(directory, max_length))


def pretrained_tokenizer(name: str) -> Tokenize:
    """The tokenizer of the ``pretrained:NAME`` peer."""
    return SubwordTokenizer(PRETRAINED[name](), PRETRAINED_MAX_LENGTH)


def usable_cores() -> int:
    """The CPUs this process may run on (``taskset``, a container's cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        return os.cpu_count() or 1


# ONNX Runtime's load-time fusions left out: SkipLayerNormalization's CPU kernel is slower than
# the Add, Add and LayerNormalization it replaces (``train.onnx_export._fuse``), and ONNX Runtime
# fuses them again at load wherever a graph names its sequence length (unknown names are ignored)
DISABLED_FUSIONS = ["SkipLayerNormFusion"]


def _session(model_file: Path, threads: int) -> Any:
    """A session of ``threads`` threads. (Always a count: left to itself, ONNX Runtime starts a
    thread per physical core of the machine and pins each to its core, outside the CPUs that
    ``taskset`` gave the process.)"""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    try:
        return onnxruntime.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"],
                                            disabled_optimizers=DISABLED_FUSIONS)
    except Exception as err:  # ONNX Runtime raises its own exception types for a damaged file
        raise ModelError(f"{model_file}: cannot load the ONNX model ({err})") from None


class OnnxEncoder(BatchedEncoder):
    """A transformer's ONNX export. One batch (a query) runs on one session at ``threads``
    threads; many batches (an index run, an evaluation) run on one single-threaded session a
    core, in parallel: a session of several threads keeps them poorly busy on batches of 8 (on
    2 cores, models/accurate 197 sentences/s at batch 256 and 196 at batch 1, against 188 and
    178 on one session of 2 threads: bench/encoding.py, 2026-11-27). A batch's vectors are the
    same either way: each is computed whole by one session, in fp32."""

    # small batches keep each MatMul's operands in cache: on 2 cores all-MiniLM-L6-v2 encodes
    # about 1.75x the sentences/s at 8 texts a batch than at 256 (bench/runtime.py), and
    # models/accurate 1.2x with batches capped at 256 characters (one 260-character text each)
    # than with 8 such texts a batch, on an AVX2 CPU with a 512 KB L2 cache, with no loss on
    # short texts (docs/results.md)
    max_batch = 8
    max_batch_chars = 256

    def __init__(self, kind: str, model_file: Path, tokenize: Tokenize, threads: int | None) -> None:
        self.cores = threads or usable_cores()  # single-threaded sessions for many batches
        self.session = _session(model_file, self.cores)
        self.model_file, self.kind, self.tokenize = model_file, kind, tokenize
        self._parallel: queue.SimpleQueue[Any] | None = None  # made on the first run of many
        self._making = threading.Lock()
        self.input_names = [node.name for node in self.session.get_inputs()]
        self.dim = int(self.session.get_outputs()[0].shape[-1])

    @classmethod
    def from_directory(cls, directory: Path, config: dict[str, Any], threads: int | None) -> OnnxEncoder:
        return cls(config["kind"], directory / ONNX_FILE, directory_tokenizer(directory, config), threads)

    @classmethod
    def for_pretrained(cls, name: str, threads: int | None) -> OnnxEncoder:
        return cls("pretrained", pretrained_export_dir(name) / ONNX_FILE, pretrained_tokenizer(name), threads)

    def knows_words(self, text: str) -> bool:
        return self.tokenize.knows_words(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._run(self.session, texts)

    def embed_batches(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        """Each batch's vectors, in order: one batch on the main session, many spread over one
        single-threaded session a core (ONNX Runtime and the tokenizer release the GIL)."""
        batches = iter(batches)
        first = list(itertools.islice(batches, 2))
        if len(first) < 2 or self.cores < 2:
            return map(self.embed_batch, itertools.chain(first, batches))
        with self._making:
            if self._parallel is None:
                made: queue.SimpleQueue[Any] = queue.SimpleQueue()
                for _ in range(self.cores):
                    made.put(_session(self.model_file, 1))
                self._parallel = made
        sessions = self._parallel

        def run(texts: Sequence[str]) -> np.ndarray:
            session = sessions.get()  # as many sessions as threads: one is always free
            try:
                return self._run(session, texts)
            finally:
                sessions.put(session)

        with ThreadPoolExecutor(self.cores) as pool:
            return iter(list(pool.map(run, itertools.chain(first, batches))))

    def _run(self, session: Any, texts: Sequence[str]) -> np.ndarray:
        arrays = self.tokenize(texts)
        return session.run(None, {name: arrays[name] for name in self.input_names})[0]

