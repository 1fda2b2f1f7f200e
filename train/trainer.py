"""The training loop behind ``askalike train CONFIG.toml [--resume]``.

Seeded and resumable exactly: every batch is a function of (seed, epoch, position), the
checkpoint holds model, optimiser, cursors and RNG state and is written atomically, so a run
killed at any moment (kill -9 included) continues from its last checkpoint as if never stopped.
Under ``torchrun`` it trains with DistributedDataParallel, negatives drawn from the global batch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from torch import nn

from askalike.core.datasets import read_word_vectors
from askalike.core.devices import Device
from askalike.core.files import atomic_write, remove_stale_temporaries
from askalike.core.model_dir import PRETRAINED
from askalike.core.sts_evaluation import evaluate_stsb
from askalike.core.text import Vocabulary
from askalike.train.config import TrainConfig, parse_config
from askalike.train.corpus import TrainingData, load_training_data
from askalike.train.devices import torch_device
from askalike.train.modules import VOCABULARY_MODULES, EncoderModule, PretrainedModule, VocabularyModule
from askalike.train.multitask import Batch, Task, training_model, training_tasks
from askalike.train.task_inputs import distillation_sample, task_inputs
from askalike.train.teacher_init import initialise_from_teacher
from askalike.train.trained_model import TrainedModel, load_model, save_model

GLOVE = "vectors/glove.6B.50d.top100k.txt.gz"
T = TypeVar("T")


@dataclass
class Cursor:
    """Where a task's batch stream stands: epoch and batch index within it."""

    epoch: int = 0
    index: int = 0


@dataclass
class RunState:
    step: int = 0
    cursors: dict[str, Cursor] = field(default_factory=dict)  # by task stream, made on first use
    train_seconds: float = 0.0  # time in training steps only (not evaluation), over all resumes
    seen_pairs: int = 0


class BatchStream:
    """Full batches of one epoch after another, each epoch shuffled from (seed, epoch)."""

    def __init__(self, make_epoch: Callable[[int], list[list[int]]], batch_size: int,
                 cursor: Cursor) -> None:
        self.make_epoch, self.batch_size, self.cursor = make_epoch, batch_size, cursor
        self._epoch: list[list[int]] | None = None

    def next(self) -> list[int]:
        while True:
            if self._epoch is None:
                self._epoch = [b for b in self.make_epoch(self.cursor.epoch) if len(b) == self.batch_size]
                if not self._epoch:
                    raise ValueError(f"not enough training pairs for one batch of {self.batch_size}")
            if self.cursor.index < len(self._epoch):
                batch = self._epoch[self.cursor.index]
                self.cursor.index += 1
                return batch
            # moved in place: the cursor is the run state's, which the checkpoint saves
            self.cursor.epoch, self.cursor.index, self._epoch = self.cursor.epoch + 1, 0, None


def distributed_context() -> tuple[int, int]:
    """(rank, world size); joins the process group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def build_encoder(config: TrainConfig, vocabulary_texts: Iterable[str], data_dir: Path,
                  vocabulary: Vocabulary | None, run_dir: Path) -> EncoderModule:
    """The encoder to train: a pretrained one, an earlier stage's, or a new one over
    ``vocabulary`` (built from ``vocabulary_texts`` when None)."""
    model = config.model
    if model.initialise_from:
        encoder = load_model(model.initialise_from).encoder
        if encoder.kind != model.kind:
            raise ValueError(f"[model] initialise_from = {model.initialise_from!r} is a "
                             f"{encoder.kind} model, the config's kind is {model.kind!r}")
        return encoder.train()
    if model.kind == "pretrained":
        return PretrainedModule(PRETRAINED[model.pretrained](), **model.encoder)
    if vocabulary is None:
        vocabulary = Vocabulary.build(vocabulary_texts, model.vocabulary_size, model.min_count,
                                      model.oov_buckets, model.bigram_buckets)
    encoder = VOCABULARY_MODULES[model.kind](vocabulary, **model.encoder)
    if model.glove:
        load_glove(encoder, data_dir / GLOVE)
    if model.teacher_init:
        initialise_from_teacher(encoder, config.data.distill_teacher, run_dir / "teacher")
    return encoder


def load_glove(encoder: VocabularyModule, path: Path) -> int:
    """Copy GloVe vectors into the word embeddings of known words; returns how many."""
    table = encoder.word_embeddings.weight
    found = 0
    with torch.no_grad():
        for word, vector in read_word_vectors(path):
            if vector.shape[0] != table.shape[1]:
                raise ValueError(f"GloVe has {vector.shape[0]} dimensions, the encoder's word "
                                 f"embeddings {table.shape[1]}")
            index = encoder.vocabulary.known_id(word)
            if index is not None:
                table[index] = torch.from_numpy(vector)
                found += 1
    return found


def make_optimizers(model: nn.Module, learning_rate: float,
                    sparse_embeddings: bool) -> list[torch.optim.Optimizer]:
    """Adam, or with ``sparse_embeddings`` SparseAdam for the embedding tables and Adam for the
    rest: dense Adam touches every row of a 100k-word table each step, which dominates a DAN
    step on a CPU (about 16x slower measured on a 300k-row DAN)."""
    if not sparse_embeddings:
        return [torch.optim.Adam(model.parameters(), lr=learning_rate)]
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    for table in tables:
        table.sparse = True
    sparse_ids = {id(table.weight) for table in tables}
    return [torch.optim.SparseAdam([t.weight for t in tables], lr=learning_rate),
            torch.optim.Adam([p for p in model.parameters() if id(p) not in sparse_ids], lr=learning_rate)]


def _resumable(config: dict[str, Any]) -> dict[str, Any]:
    """What must match to resume a run: everything but the step count (runs may be extended).
    A checkpoint written before a key existed is read with that key's default."""
    config = parse_config(config).as_dict()
    return {**config, "training": {k: v for k, v in config["training"].items() if k != "steps"}}


class Trainer:
    def __init__(self, config: TrainConfig, data_dir: Path, run_dir: Path,
                 data: TrainingData | None = None,
                 dev_evaluation: Callable[[EncoderModule], dict[str, Any]] | None = None,
                 device: Device = Device.auto) -> None:
        """``dev_evaluation`` replaces the STS Benchmark dev figure of each evaluation (e.g.
        ``askalike tune``'s held-out pairs, so that it needs no benchmark data); ``device`` is
        where it trains (``auto``: a GPU where torch sees one)."""
        self.config, self.data_dir, self.run_dir = config, data_dir, run_dir
        self.dev_evaluation = dev_evaluation
        self.rank, self.world = distributed_context()
        self.device = torch_device(device)
        self.data = data if data is not None else load_training_data(data_dir, config.data)
        self.checkpoint_path = run_dir / "checkpoint.pt"
        self.log_path = run_dir / "metrics.jsonl"
        self.state = RunState()
        torch.manual_seed(config.seed)
        vocabulary_path = run_dir / "vocab.json"
        vocabulary = Vocabulary.load(vocabulary_path) if vocabulary_path.is_file() else None
        sample = distillation_sample(config, self.data, data_dir, run_dir)
        vocabulary_texts = (sample.texts if config.model.vocabulary_from_distillation
                            else (text for pair in self.data.pairs for text in pair))
        encoder = build_encoder(config, vocabulary_texts, data_dir, vocabulary, run_dir)
        if isinstance(encoder, VocabularyModule) and self.rank == 0:
            run_dir.mkdir(parents=True, exist_ok=True)
            encoder.vocabulary.save(vocabulary_path)
        training = config.training
        # the heads are initialised before the teacher pass, which may draw from the same RNG
        model = training_model(encoder, training, self.data)
        inputs = task_inputs(config, sample, self.data, encoder, run_dir, self.rank == 0,
                             self._rank_zero_first)
        self.model = model.to(self.device)
        self.objective, self.auxiliary = training_tasks(training, self.data, encoder, inputs)
        self.tasks = {task.name: task for task in (self.objective, *self.auxiliary)}
        self.optimizers = make_optimizers(self.model, training.learning_rate, training.sparse_embeddings)
        self.wrapped: nn.Module = self.model
        if self.world > 1:
            # the NLI head sits idle on response steps and vice versa
            self.wrapped = nn.parallel.DistributedDataParallel(
                self.model, find_unused_parameters=model.nli_head is not None or bool(self.auxiliary))

    def _rank_zero_first(self, compute: Callable[[], T]) -> T:
        """``compute()`` on rank 0 first (e.g. a teacher pass that fills a cache), then on the
        other ranks, which find its results cached."""
        waits = self.world > 1
        if waits and self.rank != 0:
            dist.barrier()
        result = compute()
        if waits and self.rank == 0:
            dist.barrier()
        return result

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> None:
        if self.rank != 0:
            return
        payload = {
            "model": self.model.state_dict(),
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
            "step": self.state.step,
            "cursors": {k: (c.epoch, c.index) for k, c in self.state.cursors.items()},
            "throughput": (self.state.train_seconds, self.state.seen_pairs),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "config": self.config.as_dict(),
        }
        # a killed run's partial checkpoint goes first (rank 0 is the only writer of the run)
        remove_stale_temporaries(self.checkpoint_path.parent, f".{self.checkpoint_path.name}.*.tmp")
        with atomic_write(self.checkpoint_path) as temporary, open(temporary, "wb") as handle:
            torch.save(payload, handle)

    def load_checkpoint(self) -> bool:
        if not self.checkpoint_path.is_file():
            return False
        payload = torch.load(self.checkpoint_path, map_location=self.device, weights_only=False)
        if _resumable(payload["config"]) != _resumable(self.config.as_dict()):
            raise ValueError(f"{self.checkpoint_path} was written by a different config; "
                             "start a new run directory or restore that config")
        self.model.load_state_dict(payload["model"])
        for optimizer, state in zip(self.optimizers, payload["optimizers"], strict=True):
            optimizer.load_state_dict(state)
        self.state = RunState(payload["step"], {k: Cursor(*v) for k, v in payload["cursors"].items()},
                              *payload.get("throughput", (0.0, 0)))
        torch.set_rng_state(payload["torch_rng"].cpu())
        if payload["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["cuda_rng"])
        self._forget_log_after(self.state.step)
        return True

    def _forget_log_after(self, step: int) -> None:
        """Drop log records of steps that the checkpoint does not hold (they will be redone)."""
        if self.rank != 0 or not self.log_path.is_file():
            return
        kept = [line for line in self.log_path.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= step]
        self.log_path.write_text("".join(line + "\n" for line in kept))

    # ------------------------------------------------------------------ steps

    def _task(self, step: int) -> Task:
        """The task of a step: an auxiliary task with its share of the steps, else the objective."""
        draw = np.random.default_rng([self.config.seed, step]).random()
        for task in self.auxiliary:
            if draw < task.share:
                return task
            draw -= task.share
        return self.objective

    def _local(self, batch: list[Any]) -> list[Any]:
        size = len(batch) // self.world
        return batch[self.rank * size : (self.rank + 1) * size]

    def step(self, task: str, first: list[str], second: list[str],
             labels: torch.Tensor | None = None) -> float:
        """One optimiser step of the task named ``task`` on this worker's share of a global batch."""
        self.model.train()
        mixed = self.device.type == "cuda" and self.config.training.mixed_precision
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=mixed):
            loss = self.wrapped(self.tasks[task], first, second, labels, self.state.step)
        for optimizer in self.optimizers:
            optimizer.zero_grad()
        loss.backward()
        # sparse gradients are left out of clipping (its norm does not take them)
        dense = [p for p in self.model.parameters() if p.grad is not None and not p.grad.is_sparse]
        nn.utils.clip_grad_norm_(dense, self.config.training.max_grad_norm)
        for optimizer in self.optimizers:
            optimizer.step()
        return float(loss.detach())

    def _streams(self) -> dict[str, BatchStream]:
        """A batch stream per task, by its stream name."""
        seed = self.config.seed
        return {task.stream: BatchStream(partial(task.epoch_batches, seed), task.batch_size,
                                         self.state.cursors.setdefault(task.stream, Cursor()))
                for task in self.tasks.values()}

    def _batch(self, task: Task, streams: dict[str, BatchStream]) -> Batch:
        """This worker's share of the next batch of ``task``: texts, paired texts, labels."""
        return task.batch(self._local(streams[task.stream].next()))

    # ------------------------------------------------------------------ evaluation and logging

    def trained_model(self) -> TrainedModel:
        """The encoder with the heads it was trained with (a CSE model scores by cosine)."""
        return TrainedModel(self.model.encoder, self.model.response_head, self.model.nli_head)

    def evaluate(self) -> dict[str, Any]:
        """Each task's own figures, and the encoder's STS Benchmark dev correlation."""
        metrics: dict[str, Any] = {}
        model = self.trained_model()
        for task in self.tasks.values():
            metrics |= task.evaluate(model)
        if self.dev_evaluation is not None:
            return metrics | self.dev_evaluation(self.model.encoder)
        metrics["stsb_dev_pearson"] = evaluate_stsb(self.model.encoder, self.data_dir, "dev")["pearson"]
        return metrics

    def log(self, record: dict[str, Any]) -> None:
        if self.rank == 0:
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------------ the loop

    def run(self, resume: bool = False, show_progress: bool = True,
            stop: Callable[[dict[str, Any]], bool] | None = None) -> TrainedModel:
        """Train to the configured steps (or, with ``stop``, until it returns True for an
        evaluation's figures, the last step's too), then save RUN_DIR/model."""
        training = self.config.training
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            self.load_checkpoint()
        elif self.checkpoint_path.exists():
            raise FileExistsError(f"{self.checkpoint_path} exists: pass --resume to continue it, "
                                  "or choose a new run directory")
        streams = self._streams()
        columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True),  # stdout holds only results
                      disable=not show_progress or self.rank != 0) as progress:
            bar = progress.add_task(self.config.name, total=training.steps,
                                    completed=self.state.step, status="")
            while self.state.step < training.steps:
                step_started = time.perf_counter()
                task = self._task(self.state.step)
                first, second, labels = self._batch(task, streams)
                loss = self.step(task.name, first, second, labels)
                if task is self.objective:
                    self.state.seen_pairs += len(first) * self.world
                self.state.step += 1
                self.state.train_seconds += time.perf_counter() - step_started
                rate = self.state.seen_pairs / self.state.train_seconds
                progress.update(bar, completed=self.state.step,
                                status=f"loss {loss:.3f} · {rate:,.0f} pairs/s")
                step = self.state.step
                if step % training.log_every == 0:
                    self.log({"step": step, "task": task.name, "loss": loss, "pairs_per_s": rate})
                if self.rank == 0 and step % training.eval_every == 0 and (
                        step < training.steps or stop is not None):
                    figures = self.evaluate()
                    self.log({"step": step, "eval": figures})
                    if stop is not None and stop(figures):
                        self.save_checkpoint()
                        break
                if step % training.checkpoint_every == 0 or step == training.steps:
                    self.save_checkpoint()
        model = self.trained_model()
        if self.rank == 0:
            final = self.evaluate()  # the last step's evaluation, logged and kept with the model
            self.log({"step": self.state.step, "eval": final})
            model.metrics = {"config": self.config.name, "steps": self.state.step,
                             "train_pairs": len(self.data.pairs), "nli_pairs": len(self.data.nli),
                             "pairs_per_s": self.state.seen_pairs / max(self.state.train_seconds, 1e-9),
                             "train_seconds": round(self.state.train_seconds, 1),
                             "device": str(self.device), "world_size": self.world, **final}
            save_model(model, self.run_dir / "model", half_precision=training.half_precision,
                       int8_embeddings=training.int8_embeddings)
        return model
