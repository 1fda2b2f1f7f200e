"""Training tasks: per objective, where its batches come from, its loss and its evaluation.

Each training step draws one task (an auxiliary task by its share of the steps, the main
objective otherwise), takes the next batch of that task's stream and descends the task's loss.
A new objective is a ``Task`` subclass here, built in ``training_tasks``; one that needs a head
also gets it in ``training_model``, as a module of ``TrainingModel`` (so that it is optimised,
synchronised under DDP and saved with the model).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import torch
from torch import nn

from askalike.core.datasets import NLI_LABELS, NliPair, StsPair
from askalike.train.batching import text_key, unique_text_batches
from askalike.train.config import TrainingConfig
from askalike.train.corpus import Pair, TrainingData
from askalike.train.distillation import distillation_loss
from askalike.train.evaluation import response_precision
from askalike.train.listwise import ListwiseLists, listwise_loss
from askalike.train.modules import EncoderModule, VocabularyModule
from askalike.train.objectives import (
    NliHead,
    ResponseSelectionHead,
    cosine_ranking_loss,
    cosine_regression_loss,
    cse_margin_loss,
    embedding_pull,
)
from askalike.train.task_inputs import TaskInputs
from askalike.train.trained_model import TrainedModel

Batch = tuple[list[str], list[str], torch.Tensor | None]  # texts, paired texts, labels
Item = TypeVar("Item")
MIN_EVAL_PAIRS = 100  # held-out pairs needed for one P@N group
STS_SCALE = 5.0  # the top of StsPair scores (STS's 0-5), which the regression maps to cosine 1


class TrainingModel(nn.Module):
    """Encoder and heads as one module (what DistributedDataParallel wraps); forward = loss."""

    def __init__(self, encoder: EncoderModule, response_head: ResponseSelectionHead | None,
                 nli_head: NliHead | None) -> None:
        super().__init__()
        self.encoder, self.response_head, self.nli_head = encoder, response_head, nli_head

    def forward(self, task: Task, first: list[str], second: list[str],
                labels: torch.Tensor | None, step: int) -> torch.Tensor:
        return task.loss(self, first, second, labels, step)


class Task(ABC, Generic[Item]):
    """One training task: a stream of batches over its items, and the loss of a batch."""

    name: ClassVar[str]  # in the metrics log
    stream: ClassVar[str]  # the checkpoint cursor of its batches
    salt: ClassVar[int] = 0  # keeps its epoch shuffles apart from the other tasks'

    def __init__(self, items: Sequence[Item], batch_size: int, share: float) -> None:
        self.items, self.batch_size = items, batch_size
        self.share = share  # of the steps; the main objective has the steps the others leave

    def __len__(self) -> int:
        return len(self.items)

    def epoch_batches(self, seed: int, epoch: int) -> list[list[int]]:
        """The item indices of an epoch's batches: a seeded shuffle cut into full batches."""
        count, size = len(self), self.batch_size
        order = np.random.default_rng([seed, epoch, self.salt]).permutation(count).tolist()
        return [order[i : i + size] for i in range(0, count - size + 1, size)]

    @abstractmethod
    def batch(self, indices: list[int]) -> Batch:
        """The texts, paired texts and labels of the items at ``indices``."""

    @abstractmethod
    def loss(self, model: TrainingModel, first: list[str], second: list[str],
             labels: torch.Tensor | None, step: int) -> torch.Tensor:
        """The loss of one batch at training step ``step``."""

    def evaluate(self, model: TrainedModel) -> dict[str, Any]:
        """Figures logged at each evaluation; none unless the task has its own."""
        return {}


class PairTask(Task[Pair]):
    """A main objective: (input, response) pairs in batches without a repeated text, with the
    other pairs of the global batch as negatives; scored by P@N on held-out pairs."""

    stream = "pairs"

    def __init__(self, pairs: Sequence[Pair], heldout: Sequence[Pair], batch_size: int) -> None:
        super().__init__(pairs, batch_size, share=0.0)
        self.heldout = heldout

    def epoch_batches(self, seed: int, epoch: int) -> list[list[int]]:
        return unique_text_batches(self.items, self.batch_size, seed * 1000 + epoch)

    def batch(self, indices: list[int]) -> Batch:
        chosen = [self.items[i] for i in indices]
        return [a for a, _ in chosen], [b for _, b in chosen], None

    def evaluate(self, model: TrainedModel) -> dict[str, Any]:
        if len(self.heldout) < MIN_EVAL_PAIRS:
            return {}
        return {"response": response_precision(model, self.heldout)}


class ResponseSelection(PairTask):
    """Yang et al.: pick each input's response among the batch's, through the response head,
    and among the hard negatives its pairs carry (``TrainingData.hard_negatives``): those follow
    the responses in a batch's second texts, each at most once and never a text of the batch."""

    name = "response"

    def __init__(self, pairs: Sequence[Pair], heldout: Sequence[Pair], batch_size: int,
                 hard_negatives: Mapping[int, str]) -> None:
        super().__init__(pairs, heldout, batch_size)
        self.hard_negatives = hard_negatives

    def batch(self, indices: list[int]) -> Batch:
        inputs, responses, _ = super().batch(indices)
        seen = {text_key(text) for text in inputs + responses}
        negatives = []
        for index in indices:
            negative = self.hard_negatives.get(index)
            if negative is not None and (key := text_key(negative)) not in seen:
                seen.add(key)
                negatives.append(negative)
        return inputs, responses + negatives, None

    def loss(self, model: TrainingModel, first: list[str], second: list[str],
             labels: torch.Tensor | None, step: int) -> torch.Tensor:
        assert model.response_head is not None
        responses = model.encoder.embed(second)
        rows = len(first)
        negatives = responses[rows:] if len(second) > rows else None
        return model.response_head.loss(model.encoder.embed(first), responses[:rows], negatives)


class CseMargin(PairTask):
    """Jiao et al.: the cosine margin loss against in-batch negatives (summed over all of them
    for the first ``hard_negative_after`` steps, the hardest after), plus the L2 pull of the
    word embeddings towards their values when the task was built."""

    name = "cse"

    def __init__(self, pairs: Sequence[Pair], heldout: Sequence[Pair], batch_size: int,
                 encoder: EncoderModule, margin: float, pull: float,
                 hard_negative_after: int) -> None:
        super().__init__(pairs, heldout, batch_size)
        self.margin, self.pull, self.hard_negative_after = margin, pull, hard_negative_after
        self.initial_embeddings: torch.Tensor | None = None
        if pull and isinstance(encoder, VocabularyModule):
            self.initial_embeddings = encoder.word_embeddings.weight.detach().clone()

    def loss(self, model: TrainingModel, first: list[str], second: list[str],
             labels: torch.Tensor | None, step: int) -> torch.Tensor:
        encoder = model.encoder
        a, b = encoder.embed(first), encoder.embed(second)
        loss = cse_margin_loss(a, b, self.margin, hardest=step >= self.hard_negative_after)
        if self.initial_embeddings is not None:
            assert isinstance(encoder, VocabularyModule)
            ids = torch.cat([encoder.tokenize(first)["words"].flatten(),
                             encoder.tokenize(second)["words"].flatten()]).to(a.device)
            loss = loss + embedding_pull(encoder.word_embeddings,
                                         self.initial_embeddings.to(a.device), ids, self.pull)
        return loss


class NliClassification(Task[NliPair]):
    """NLI pairs through the NLI head (Yang et al. 2.4), labels the three classes."""

    name = stream = "nli"
    salt = 1

    def batch(self, indices: list[int]) -> Batch:
        chosen = [self.items[i] for i in indices]
        labels = torch.tensor([NLI_LABELS.index(p.label) for p in chosen])
        return [p.premise for p in chosen], [p.hypothesis for p in chosen], labels

    def loss(self, model: TrainingModel, first: list[str], second: list[str],
             labels: torch.Tensor | None, step: int) -> torch.Tensor:
        assert model.nli_head is not None and labels is not None
        a, b = model.encoder.embed(first), model.encoder.embed(second)
        return model.nli_head.loss(a, b, labels.to(a.device))


class Distillation(Task[int]):
    """Texts with their teacher vectors as labels; the second texts are unused. The items are
    rows of the sample (``distillation_rows``: some texts may appear more than once)."""

    name = stream = "distill"
    salt = 2

    def __init__(self, texts: Sequence[str], vectors: torch.Tensor, rows: np.ndarray,
                 batch_size: int, share: float, scale: float) -> None:
        super().__init__(rows, batch_size, share)
        self.texts, self.vectors, self.scale = texts, vectors, scale

    def batch(self, indices: list[int]) -> Batch:
        rows = self.items[indices]
        return [self.texts[row] for row in rows], [], self.vectors[rows]

    def loss(self, model: TrainingModel, first: list[str], second: list[str],
             labels: torch.Tensor | None, step: int) -> torch.Tensor:
        assert labels is not None
        student = model.encoder.embed(first)
        return distillation_loss(student, labels.to(student.device), self.scale)


class ListwiseDistillation(Task[int]):
    """Forum questions (the items are their rows), each with its candidate questions in the
    second texts and the teacher's cosines to them as labels (``train.listwise``); a batch holds
    ``batch_size // candidates`` questions."""

    name = stream = "listwise"
    salt = 4

    def __init__(self, lists: ListwiseLists, batch_size: int, share: float, scale: float) -> None:
        self.count = lists.candidates.shape[1]
        super().__init__(range(len(lists.questions)), batch_size // self.count, share)
        self.texts, self.candidates = lists.questions, lists.candidates
        self.teacher_cosines, self.scale = torch.from_numpy(lists.teacher_cosines), scale

    def batch(self, indices: list[int]) -> Batch:
        return ([self.texts[row] for row in indices],
                [self.texts[c] for row in indices for c in self.candidates[row]],
                self.teacher_cosines[indices])

    def loss(self, model: TrainingModel, first: list[str], second: list[str],
             labels: torch.Tensor | None, step: int) -> torch.Tensor:
        assert labels is not None
        queries = model.encoder.embed(first)
        candidates = model.encoder.embed(second).reshape(len(first), self.count, -1)
        return listwise_loss(queries, candidates, labels.to(queries.device), self.scale)


class ScoredPairs(Task[StsPair]):
    """Scored sentence pairs, the gold score scaled to [0, 1] (STS_SCALE): the cosine regressed on
    it, or (``ranking``) the batch's pairs ordered by it (``cosine_ranking_loss``)."""

    name = stream = "sts"
    salt = 3

    def __init__(self, items: Sequence[StsPair], batch_size: int, share: float, ranking: bool) -> None:
        super().__init__(items, batch_size, share)
        self.pair_loss = cosine_ranking_loss if ranking else cosine_regression_loss

    def batch(self, indices: list[int]) -> Batch:
        chosen = [self.items[i] for i in indices]
        return ([p.sentence1 for p in chosen], [p.sentence2 for p in chosen],
                torch.tensor([p.score / STS_SCALE for p in chosen]))

    def loss(self, model: TrainingModel, first: list[str], second: list[str],
             labels: torch.Tensor | None, step: int) -> torch.Tensor:
        assert labels is not None
        a, b = model.encoder.embed(first), model.encoder.embed(second)
        return self.pair_loss(a, b, labels.to(a.device))


def training_model(encoder: EncoderModule, training: TrainingConfig,
                   data: TrainingData) -> TrainingModel:
    """The encoder with the heads its tasks need: the NLI head when there are NLI pairs (kept
    with the model even at nli_ratio 0), the response head for the response objective."""
    nli_head = NliHead(encoder.dim) if data.nli else None
    response_head = (ResponseSelectionHead(encoder.dim, training.residual_response_head)
                     if training.objective == ResponseSelection.name else None)
    return TrainingModel(encoder, response_head, nli_head)


def training_tasks(training: TrainingConfig, data: TrainingData, encoder: EncoderModule,
                   inputs: TaskInputs) -> tuple[PairTask, list[Task[Any]]]:
    """(the main objective, the auxiliary tasks that have items, in the order steps draw them)."""
    if training.sts_ratio > 0 and not data.sts:
        raise ValueError("[training] sts_ratio > 0 needs scored pairs ([data] stsb_train = true)")
    heldout = data.heldout[: training.eval_pairs]
    objective: PairTask
    if training.objective == CseMargin.name:
        objective = CseMargin(data.pairs, heldout, training.batch_size, encoder, training.margin,
                              training.embedding_pull, training.hard_negative_after)
    else:
        objective = ResponseSelection(data.pairs, heldout, training.batch_size, data.hard_negatives)
    auxiliary: list[Task[Any]] = [NliClassification(data.nli, training.nli_batch_size, training.nli_ratio)]
    if inputs.distill_vectors is not None:
        auxiliary.append(Distillation(inputs.distill_texts, inputs.distill_vectors, inputs.distill_rows,
                                      training.batch_size, training.distill_ratio,
                                      training.distill_scale))
    auxiliary.append(ScoredPairs(data.sts, training.batch_size, training.sts_ratio,
                                 ranking=training.sts_loss == "ranking"))
    if inputs.listwise is not None:
        auxiliary.append(ListwiseDistillation(inputs.listwise, training.batch_size,
                                              training.listwise_ratio, training.distill_scale))
    return objective, [task for task in auxiliary if len(task)]
