"""``askalike index --engine ray``: chunks embedded by Ray Data tasks on a local or existing Ray
cluster, for the run's loop in ``indexer.build`` to store exactly as the in-process engine does.

Chunks go to Ray a window at a time (about ``WINDOW_TEXTS`` texts): one Ray Data pipeline per
window, one row per chunk, mapped by ``embed_chunk`` in Ray tasks. A task embeds its whole chunk
with one ``Encoder.encode`` call, as the in-process engine does, so the vectors are the same bit
for bit; the results come back in chunk order, and the driver stores each chunk while the
cluster embeds the next ones. Tasks rather than an actor pool: a pool's actors start anew for
each pipeline (seconds each), while task workers stay up, and each loads the encoder once
(``_ENCODERS``). Every node needs askalike installed and the model directory at the same path
(or a ``pretrained:`` model).
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from askalike.core.encoder import Encoder
from askalike.core.errors import UserError
from askalike.core.loader import load_encoder
from askalike.core.model_dir import ModelError, weights_fingerprint

try:
    import ray
except ImportError:  # the optional extra: askalike[ray]
    ray = None

WINDOW_TEXTS = 32_768  # texts handed to Ray at a time: bounds read-ahead, amortises a pipeline's start
PROBE_SECONDS = 5.0  # how long to wait for a TCP connection to a cluster's address
_ENCODERS: dict[tuple[str, str, int], Encoder] = {}  # in a worker: (model, fingerprint, threads)


class EngineError(UserError):
    """The Ray engine cannot run: Ray is not installed, or the cluster cannot be reached."""


def _require_reachable(address: str) -> None:
    """Fail fast on an address nothing listens on: Ray itself retries for a minute or more."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "local": Ray finds or starts the cluster itself
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_SECONDS).close()
    except OSError as err:
        raise EngineError(f"cannot reach the Ray cluster at {address} ({err.strerror or err}): start "
                          "it with `ray start --head`, or check --ray-address / $RAY_ADDRESS; "
                          "nothing was indexed") from None


@contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray connected for the run: to ``address``, else to ``$RAY_ADDRESS`` or a cluster started on
    this machine by ``ray start``, else to a local instance started for the run. A connection the
    caller opened already (``ray.init``) is used as it is; one opened here is closed after."""
    if ray is None:
        raise EngineError("--engine ray needs Ray: pip install 'askalike[ray]'")
    if ray.is_initialized():
        yield
        return
    target = address or os.environ.get("RAY_ADDRESS")
    if target:
        _require_reachable(target)
    try:  # quiet: the run reports itself, and a failing task raises its own error
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise EngineError(f"cannot start or join a Ray cluster ({target or 'local'}): "
                          f"{str(err).splitlines()[0]}") from None
    importlib.import_module("ray.data")  # first: its import sets its own log levels
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


def _worker_encoder(model: str, fingerprint: str, threads: int) -> Encoder:
    """The run's encoder in this worker process, loaded on its first chunk; the same weights as
    the driver's, or a ModelError (a node may hold another model at the same path)."""
    key = (model, fingerprint, threads)
    if key not in _ENCODERS:
        if weights_fingerprint(model) != fingerprint:
            raise ModelError(f"{model} holds other weights (or another export) than on the machine "
                             "that runs the index")
        _ENCODERS[key] = load_encoder(model, threads=threads)
    return _ENCODERS[key]


def embed_chunk(batch: dict[str, np.ndarray], model: str, fingerprint: str, batch_size: int,
                threads: int) -> dict[str, np.ndarray]:
    """In a Ray task: one chunk (the batch's one row) embedded as the in-process engine does. A
    model that a node lacks comes back as the row's ``problem``, for the driver to raise."""
    try:
        encoder = _worker_encoder(model, fingerprint, threads)
    except UserError as err:
        return {"problem": np.array([f"on {socket.gethostname()}: {err}"]),
                "vectors": np.zeros((1, 0, 0), dtype=np.float32)}
    (texts,) = batch["texts"]
    vectors = encoder.encode([str(text) for text in texts], batch_size=batch_size)
    return {"problem": np.array([""]), "vectors": vectors[None]}


def _windows(chunks: Iterable[list[str]], texts: int) -> Iterator[list[list[str]]]:
    """Consecutive chunks in lists of about ``texts`` texts (at least one chunk each)."""
    window: list[list[str]] = []
    size = 0
    for chunk in chunks:
        window.append(chunk)
        size += len(chunk)
        if size >= texts:
            yield window
            window, size = [], 0
    if window:
        yield window


@dataclass
class RayEngine:
    """``--engine ray``, inside ``ray_session``. ``model`` names the encoder as every node sees it
    (an absolute directory or ``pretrained:NAME``); each task takes ``threads`` CPUs."""

    model: str
    fingerprint: str
    batch_size: int
    threads: int = 1

    def _pipeline(self, window: list[list[str]]) -> ray.data.Dataset:
        import ray.data

        dataset = ray.data.from_items([{"texts": texts} for texts in window],
                                      override_num_blocks=len(window))
        vectors = dataset.map_batches(
            embed_chunk, batch_size=1, batch_format="numpy", num_cpus=self.threads,
            fn_kwargs={"model": self.model, "fingerprint": self.fingerprint,
                       "batch_size": self.batch_size, "threads": self.threads})
        vectors.context.execution_options.preserve_order = True
        # Ray Data reserves half of the cluster's resources, split among its operators, which on a
        # small cluster left one task running at a time: without it every CPU embeds (1.6x on 2
        # cores). Read-ahead stays bounded by the window (WINDOW_TEXTS).
        vectors.context.op_resource_reservation_enabled = False
        vectors.context.enable_progress_bars = False  # the run has its own
        return vectors

    def embed(self, chunks: Iterable[list[str]]) -> Iterator[np.ndarray]:
        for window in _windows(chunks, WINDOW_TEXTS):
            for row in self._pipeline(window).iter_rows():
                if row["problem"]:
                    raise EngineError(f"a Ray task cannot embed {row['problem']}")
                yield row["vectors"]
