"""What the distillation tasks learn from beyond the training data, prepared before the first
step: the sample of texts to distill with their teacher vectors (computed once, cached in the
run directory or read from an earlier run's), and the forum questions' listwise candidate lists.

A new task that needs such inputs gets a field in ``TaskInputs`` and its preparation here;
``train.multitask.training_tasks`` hands them to the task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from askalike.core.datasets import read_sts_benchmark, stsb_path
from askalike.core.files import atomic_write
from askalike.train.config import TrainConfig
from askalike.train.corpus import TrainingData, conversation_pairs
from askalike.train.distillation import (
    distillation_rows,
    distillation_texts,
    read_distillation_texts,
    read_in_domain_count,
    teacher_vectors,
    write_distillation_texts,
)
from askalike.train.listwise import ListwiseLists, candidate_cosines, nearest_candidates
from askalike.train.modules import EncoderModule

LISTWISE_FILE = "listwise-candidates.npy"  # the run's candidate lists (rows of the forum questions)
T = TypeVar("T")
RankZeroFirst = Callable[[Callable[[], T]], T]  # runs a computation on rank 0 first, then the others


@dataclass
class DistillationSample:
    texts: list[str]
    in_domain: int  # how many of the first texts are in-domain (weighted by distill_in_domain_copies)
    cache_dir: Path  # where their teacher vectors are cached


@dataclass
class TaskInputs:
    distill_texts: list[str]
    distill_vectors: torch.Tensor | None  # None: no distillation task
    distill_rows: np.ndarray  # the rows of the sample the distillation task draws
    listwise: ListwiseLists | None  # None: no listwise task


def distillation_pool(data: TrainingData, data_dir: Path, config: TrainConfig) -> list[list[str]]:
    """The in-domain texts that ``distill_in_domain`` names (of the training pairs, NLI, STS
    Benchmark train), then the general pool."""
    sources = config.data.distill_in_domain
    in_domain = [text for pair in data.pairs for text in pair] if "pairs" in sources else []
    if "nli" in sources:
        in_domain += [text for pair in data.nli for text in (pair.premise, pair.hypothesis)]
    if "stsb" in sources:
        in_domain += [text for pair in read_sts_benchmark(stsb_path(data_dir, "train"))
                      for text in (pair.sentence1, pair.sentence2)]
    general = [text for stem in config.data.distill_conversations
               for pair in conversation_pairs(data_dir, stem)[0] for text in pair]
    return [in_domain, general]


def distillation_sample(config: TrainConfig, data: TrainingData, data_dir: Path,
                        run_dir: Path) -> DistillationSample:
    """The texts to distill (drawn, or an earlier run's), how many of their first ones are
    in-domain (an earlier run's count is read only when they are weighted), and the folder of
    their teacher vectors. Drawn before the encoder is built: its vocabulary may come from them."""
    settings = config.data
    if config.training.distill_ratio <= 0:
        return DistillationSample([], 0, run_dir / "teacher")
    if settings.distill_texts_from:
        cache_dir = Path(settings.distill_texts_from) / "teacher"
        weighted = settings.distill_in_domain_copies > 1
        return DistillationSample(read_distillation_texts(cache_dir),
                                  read_in_domain_count(cache_dir) if weighted else 0, cache_dir)
    groups = distillation_pool(data, data_dir, config)
    texts = distillation_texts(groups, settings.distill_sentences, config.seed)
    # a sample's in-domain texts are its prefix: what the in-domain group alone gives
    in_domain = len(distillation_texts(groups[:1], settings.distill_sentences, config.seed))
    return DistillationSample(texts, in_domain, run_dir / "teacher")


def task_inputs(config: TrainConfig, sample: DistillationSample, data: TrainingData,
                encoder: EncoderModule, run_dir: Path, writes: bool,
                rank_zero_first: RankZeroFirst) -> TaskInputs:
    """The teacher vectors of the sample and the listwise lists; ``writes``: this process writes
    the run's files (rank 0)."""
    if config.training.distill_ratio <= 0:
        vectors, rows = None, np.arange(0)
    else:
        settings = config.data
        if writes and not settings.distill_texts_from:
            write_distillation_texts(sample.cache_dir, sample.texts, sample.in_domain)
        vectors = torch.from_numpy(rank_zero_first(
            lambda: teacher_vectors(settings.distill_teacher, sample.texts, sample.cache_dir)))
        rows = distillation_rows(len(sample.texts), sample.in_domain, settings.distill_in_domain_copies)
    listwise = _listwise(config, data, encoder, sample.cache_dir, run_dir, writes, rank_zero_first)
    return TaskInputs(sample.texts, vectors, rows, listwise)


def _listwise(config: TrainConfig, data: TrainingData, encoder: EncoderModule, cache_dir: Path,
              run_dir: Path, writes: bool, rank_zero_first: RankZeroFirst) -> ListwiseLists | None:
    """The forum questions' candidate lists: from the teacher's vectors (cached beside the
    distillation sample's) and the starting encoder's, saved in the run so that a resumed run
    trains on the same lists even where floating point differs."""
    count = config.data.listwise_candidates
    if not count:
        return None
    questions = data.forum_questions
    if not questions:
        raise ValueError("[data] listwise_candidates needs forum questions: the CQA train "
                         "split or [data] qatar_living threads")
    teacher = rank_zero_first(lambda: teacher_vectors(
        config.data.distill_teacher, questions, cache_dir, prefix="listwise"))
    path = run_dir / LISTWISE_FILE
    candidates = np.load(path) if path.is_file() else None
    if candidates is None or candidates.shape != (len(questions), count):
        candidates = nearest_candidates(teacher, encoder.encode(questions), count)
        if writes:
            run_dir.mkdir(parents=True, exist_ok=True)
            with atomic_write(path) as temporary, open(temporary, "wb") as handle:
                np.save(handle, candidates)
    return ListwiseLists(questions, candidates, candidate_cosines(teacher, candidates))
