"""``askalike tune BASE --pairs FILE --out DIR``: a saved or shipped model fine-tuned on a user's
own labelled pairs, through the project's trainer.

The alike pairs are the input-response objective's pairs (in-batch negatives, a residual
response head that starts as the identity); each not-alike pair's second text is a hard negative
of an alike pair with the same first text (else of one that has none yet). Pairs with a score
(the pair file's ``score`` column) are also the trainer's scored pairs: a share of the steps
orders a batch of them by cosine as by score (``ScoredPairs``, CoSENT by default, or a cosine
regression on the score), which teaches the graded middle that ranking alike against not-alike
pairs does not. A held-out share of the pairs (or ``--dev
FILE``) is scored before, at each epoch's end and after; tuning stops at the first epoch that
does not raise it and keeps the best epoch's weights.

A DAN given a teacher (``--teacher``) also distills it on the training pairs' texts (the
``Distillation`` task, the teacher's vectors computed once into the run directory): a few hundred
pairs move a DAN's word rows little, a tuned transformer's vectors of the domain's texts more.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import pearsonr

from askalike.core.data_dir import DataError
from askalike.core.datasets import StsPair
from askalike.core.devices import Device
from askalike.core.errors import UserError
from askalike.core.files import file_sha256
from askalike.core.model_dir import ModelError, pretrained_name, read_model_config
from askalike.core.ood_evaluation import ranking_accuracy
from askalike.core.pair_files import LabelledPair, read_labelled_pairs, text_fraction
from askalike.train.batching import text_key, unique_text_batches
from askalike.train.config import DataConfig, ModelConfig, TrainConfig, TrainingConfig
from askalike.train.corpus import Pair, TrainingData
from askalike.train.distillation import teacher_vectors, write_distillation_texts
from askalike.train.modules import EncoderModule
from askalike.train.multitask import STS_SCALE
from askalike.train.trained_model import load_model
from askalike.train.trainer import Trainer

DEV_SHARE = 0.1  # of the pairs' first texts held out to measure and stop on, without --dev
MIN_DEV_PAIRS = 10
CHECKPOINT_FILE = "checkpoint.pt"  # what the trainer writes in the run directory (Trainer.checkpoint_path)


@dataclass(frozen=True)
class TuneSettings:
    epochs: int = 3  # at most; tuning stops earlier when the dev figure stops rising
    batch_size: int | None = None  # default: by the base's kind (see _kind_defaults)
    learning_rate: float | None = None  # default: by the base's kind
    # of the steps, those that learn from the scores; default: the scored pairs' share of the
    # batches of an epoch (one epoch: every alike pair and every scored pair in a batch once)
    score_share: float | None = None
    score_loss: str | None = None  # ranking | regression (TrainingConfig.sts_loss); default: by kind
    teacher: str | None = None  # a DAN base distills it on the training texts (a model or pretrained:NAME)
    device: Device = Device.auto  # where it trains (auto: a GPU where torch sees one)
    mixed_precision: bool = True  # bf16 autocast on a GPU (TrainingConfig.mixed_precision)
    seed: int = 13


def split_dev(pairs: Sequence[LabelledPair]) -> tuple[list[LabelledPair], list[LabelledPair]]:
    """(training pairs, dev pairs): the fixed DEV_SHARE of first texts, every pair of a text on
    one side."""
    dev = [pair for pair in pairs if text_fraction(pair.text_a) < DEV_SHARE]
    train = [pair for pair in pairs if text_fraction(pair.text_a) >= DEV_SHARE]
    return train, dev


def training_data(pairs: Sequence[LabelledPair]) -> TrainingData:
    """The alike pairs, with the not-alike pairs' second texts as their hard negatives, and the
    scored pairs."""
    alike: list[Pair] = [(p.text_a, p.text_b) for p in pairs if p.label == 1]
    first_rows: dict[str, int] = {}
    for row, (first, _) in enumerate(alike):
        first_rows.setdefault(first, row)
    negatives: dict[int, str] = {}
    free_rows = iter(range(len(alike)))
    for pair in (p for p in pairs if p.label == 0):
        row = first_rows.get(pair.text_a)
        if row is None or row in negatives:
            row = next((r for r in free_rows if r not in negatives), None)
        if row is not None:
            negatives[row] = pair.text_b
    scored = [StsPair(p.text_a, p.text_b, p.score * STS_SCALE, "tune") for p in pairs if p.score is not None]
    return TrainingData(pairs=alike, heldout=[], nli=[], sts=scored, hard_negatives=negatives)


def dev_figures(encoder: EncoderModule, dev: Sequence[LabelledPair]) -> dict[str, Any]:
    """``dev_score``: pair ranking accuracy where the dev pairs have both labels, else the share
    of alike pairs whose second text is the nearest of all dev second texts to the first; where
    they have scores, the mean of that and the Pearson r of cosines and scores."""
    texts = sorted({text for pair in dev for text in (pair.text_a, pair.text_b)})
    row = {text: i for i, text in enumerate(texts)}
    vectors = encoder.encode(texts)
    first = vectors[[row[p.text_a] for p in dev]]
    second = vectors[[row[p.text_b] for p in dev]]
    cosines = (first * second).sum(axis=1)
    figures: dict[str, Any] = {"dev_pairs": len(dev)}
    labels = [pair.label for pair in dev]
    if 0 in labels and 1 in labels:
        figures["dev_ranking_accuracy"] = ranking_accuracy(cosines, labels)
    alike = [i for i, label in enumerate(labels) if label == 1]
    if alike:
        candidates = sorted({dev[i].text_b for i in alike})
        candidate_vectors = vectors[[row[text] for text in candidates]]
        nearest = np.argmax(first[alike] @ candidate_vectors.T, axis=1)
        found = [candidates[n] == dev[i].text_b for n, i in zip(nearest, alike, strict=True)]
        figures["dev_top1"] = float(np.mean(found))
    scored = [i for i, pair in enumerate(dev) if pair.score is not None]
    if len({dev[i].score for i in scored}) > 1:
        figures["dev_pearson"] = float(pearsonr(cosines[scored], [dev[i].score for i in scored])[0])
    ranking = figures.get("dev_ranking_accuracy", figures.get("dev_top1"))
    figures["dev_score"] = float(np.mean([f for f in (ranking, figures.get("dev_pearson")) if f is not None]))
    return figures


class BestEpoch:
    """The trainer's stop rule: keep the weights of the best dev score so far; stop (with those
    weights back in the encoder) at the first evaluation that does not beat it."""

    def __init__(self, encoder: EncoderModule, before: float) -> None:
        self.encoder, self.best = encoder, before
        self.best_state = copy.deepcopy(encoder.state_dict())  # no epoch beats the base: keep it
        self.stopped = False

    def __call__(self, figures: dict[str, Any]) -> bool:
        if figures["dev_score"] > self.best:
            self.best, self.best_state = figures["dev_score"], copy.deepcopy(self.encoder.state_dict())
            return False
        self.encoder.load_state_dict(self.best_state)
        self.stopped = True
        return True


def _base_kind(base: str) -> str:
    if pretrained_name(base) is not None:
        return "pretrained"
    return read_model_config(Path(base))["kind"]


def _kind_defaults(kind: str) -> tuple[int, float, str]:
    """(batch size, learning rate, score loss): a transformer moves little from its pretrained
    geometry (the shipped accurate model's rate) and learns scores best by rank; a DAN's word
    rows need larger and more steps (batches of 8 at 1e-3 raised the held-out share of the STS
    Q&A tune part where 32 at 3e-4 or at 1e-2 did not), and by rank in batches of 8 they did not
    beat the untuned model where the regression did (docs/results.md, issue 43)."""
    if kind in ("pretrained", "transformer"):
        return 32, 3e-5, "ranking"
    return 8, 1e-3, "regression"


def batch_size(kind: str, settings: TuneSettings) -> int:
    return settings.batch_size or _kind_defaults(kind)[0]


def score_loss(kind: str, settings: TuneSettings) -> str:
    return settings.score_loss or _kind_defaults(kind)[2]


@dataclass(frozen=True)
class EpochPlan:
    """One epoch: every full batch of alike pairs, of scored pairs and of teacher texts once,
    each auxiliary task drawn for its share of the steps."""

    steps: int
    score_share: float
    distill_share: float


def epoch_plan(ranked: int, scored: int, distilled: int, settings: TuneSettings) -> EpochPlan:
    """The plan for these counts of full batches: each task's share is its batches' share
    (``settings.score_share`` overrides the scored pairs'); without a batch of alike pairs the
    auxiliary tasks share all the steps (the response objective is never drawn)."""
    steps = ranked + scored + distilled
    score = scored / steps if settings.score_share is None or not scored else settings.score_share
    if not ranked:
        score = score if distilled else 1.0
        return EpochPlan(steps, score, 1.0 - score if distilled else 0.0)
    return EpochPlan(steps, score, min(distilled / steps, 1.0 - score))


def tune_config(base: str, kind: str, plan: EpochPlan, settings: TuneSettings,
                distill_from: Path | None = None) -> TrainConfig:
    """The trainer's config: start from ``base``, the response objective (with the plan's
    shares of scored pairs and, from the texts under ``distill_from``, distillation), an
    evaluation (and checkpoint) at each epoch's end."""
    vocabulary_kind = kind not in ("pretrained", "transformer")
    distills = distill_from is not None and plan.distill_share > 0
    return TrainConfig(
        name=f"tune-{Path(base).name}",
        seed=settings.seed,
        model=ModelConfig(kind=kind, initialise_from=base),
        data=DataConfig(conversations=[], qatar_living=[],
                        distill_teacher=(settings.teacher or "") if distills else "",
                        distill_texts_from=str(distill_from) if distills else ""),
        training=TrainingConfig(
            objective="response", residual_response_head=True,
            steps=settings.epochs * plan.steps, batch_size=batch_size(kind, settings),
            learning_rate=settings.learning_rate or _kind_defaults(kind)[1],
            sparse_embeddings=kind == "dan", sts_ratio=plan.score_share,
            sts_loss=score_loss(kind, settings),
            distill_ratio=plan.distill_share if distills else 0.0,
            eval_every=plan.steps, checkpoint_every=max(1, plan.steps // 2),
            log_every=max(1, plan.steps // 4),
            half_precision=True, int8_embeddings=vocabulary_kind,
            mixed_precision=settings.mixed_precision),
    )


def read_tune_pairs(pairs_file: Path, dev_file: Path | None) -> tuple[list[LabelledPair], list[LabelledPair]]:
    pairs = read_labelled_pairs(pairs_file)
    if dev_file is not None:
        return pairs, read_labelled_pairs(dev_file)
    train, dev = split_dev(pairs)
    alike, scored = sum(p.label == 1 for p in dev), sum(p.score is not None for p in dev)
    if max(alike, scored) < MIN_DEV_PAIRS:
        found = f"{alike} alike pairs" + (f" and {scored} scored pairs" if scored else "")
        firsts = len({text_key(pair.text_a) for pair in pairs})
        raise DataError(pairs_file, f"{found} fall in the held-out {DEV_SHARE:.0%}, fewer than "
                                    f"{MIN_DEV_PAIRS}: the share is drawn by first text, and the "
                                    f"{len(pairs):,} pairs have {firsts:,} different first "
                                    f"text{'s' if firsts != 1 else ''}; give pairs of more texts, or "
                                    "--dev FILE")
    return train, dev


def _require_a_batch(pairs_file: Path, data: TrainingData, size: int, seed: int) -> None:
    """Refuse pairs that cannot fill one batch of ``size``, saying why: a batch holds no text
    twice (each pair's partner is the others' negative), and a pair of one text teaches nothing,
    so repeated and one-text pairs do not count (``unique_text_batches``)."""
    batches = unique_text_batches(data.pairs, size, seed)
    if len(data.sts) >= size or any(len(batch) == size for batch in batches):
        return
    two_texts = [(a, b) for a, b in data.pairs if text_key(a) != text_key(b)]
    one_text = len(data.pairs) - len(two_texts)
    texts = len({text_key(text) for pair in two_texts for text in pair})
    why = (f"{one_text:,} have the same text on both sides, which teaches nothing, and the other "
           f"{len(two_texts):,} hold" if one_text else "they hold")
    raise DataError(pairs_file, f"{len(data.pairs):,} alike pairs to learn from, but not one batch of "
                                f"{size} pairs without a text twice: {why} {texts:,} different texts; "
                                "give pairs of more texts (two different texts each), or a smaller "
                                "--batch-size")


def distillation_texts(pairs: Sequence[LabelledPair], kind: str, settings: TuneSettings) -> list[str]:
    """The training pairs' distinct texts, sorted, where a DAN base has a teacher; else none."""
    if settings.teacher is None:
        return []
    if kind != "dan":
        raise ModelError(f"a teacher distills into a DAN base (models/fast); this base is a {kind} model")
    return sorted({text for pair in pairs for text in (pair.text_a, pair.text_b)})


STEP_COST = 3.0  # a training step's time over the forward pass of its texts (forward and backward)


@dataclass(frozen=True)
class TuneEstimate:
    """How long a tune will take, from the time the base took to embed the held-out texts:
    each step embeds its pairs' texts forward and backward (``STEP_COST`` times a forward pass),
    and each epoch ends with the held-out texts embedded again."""

    steps_per_epoch: int
    epochs: int
    epoch_seconds: float
    done_steps: int = 0  # a resumed run's

    @property
    def total_seconds(self) -> float:
        left = self.epochs * self.steps_per_epoch - self.done_steps
        return self.epoch_seconds * max(left, 0) / max(self.steps_per_epoch, 1)


def estimate(steps_per_epoch: int, epochs: int, batch: int, dev_seconds: float, dev_texts: int,
             done_steps: int = 0) -> TuneEstimate:
    """``TuneEstimate`` from the seconds the held-out ``dev_texts`` took to embed."""
    per_text = dev_seconds / max(dev_texts, 1)
    epoch = steps_per_epoch * 2 * batch * per_text * STEP_COST + dev_seconds
    return TuneEstimate(steps_per_epoch, epochs, epoch, done_steps)


def tune(base: str, pairs_file: Path, out: Path, run_dir: Path, settings: TuneSettings,
         dev_file: Path | None = None, resume: bool = False, show_progress: bool = True,
         on_estimate: Callable[[TuneEstimate], None] | None = None) -> dict[str, Any]:
    """Tune ``base`` on the pairs, save the complete model directory ``out`` (config, weights,
    ONNX export of a transformer, metrics.json with the dev figures before and after and the
    data's SHA-256), and return that record. ``run_dir`` keeps the checkpoints (``resume``);
    pairs that cannot teach are refused before it is made, and one that a failed run made is
    removed unless it holds a checkpoint to resume from. ``on_estimate`` is told how long the
    run will take once the base has been measured on the held-out pairs, before training starts."""
    if out.exists():
        raise ModelError(f"{out} exists: choose a new --out directory")
    finished = run_dir / "model" / "metrics.json"
    if resume and finished.is_file() and "tune" in (metrics := json.loads(finished.read_text())):
        shutil.copytree(run_dir / "model", out)  # the run had ended (at its last epoch or a stop)
        return metrics["tune"]
    train, dev = read_tune_pairs(pairs_file, dev_file)
    data = training_data(train)
    kind = _base_kind(base)
    size = batch_size(kind, settings)
    _require_a_batch(pairs_file, data, size, settings.seed * 1000)
    with _run_directory(run_dir):
        return _tuned(base, pairs_file, out, run_dir, settings, dev_file, train, dev, data, kind, size,
                      resume, show_progress, on_estimate)


def _checkpoint_step(run_dir: Path) -> int:
    """The step of the run directory's checkpoint (0: none), read from its log."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    steps = [json.loads(line).get("step", 0) for line in lines if line.strip().startswith("{")]
    return max(steps, default=0)


@contextmanager
def _run_directory(run_dir: Path) -> Iterator[None]:
    """The run directory of a tune: one that this run made and that holds no checkpoint when it
    fails (nothing to resume) is removed; a failure after a checkpoint says how to go on."""
    made = not run_dir.exists()
    try:
        yield
    except BaseException as err:
        if not (run_dir / CHECKPOINT_FILE).is_file():
            if made:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        if isinstance(err, UserError):
            raise ModelError(f"{err}; the run so far is kept in {run_dir}: `--resume` continues it") from None
        raise


def _tuned(base: str, pairs_file: Path, out: Path, run_dir: Path, settings: TuneSettings,
           dev_file: Path | None, train: list[LabelledPair], dev: list[LabelledPair], data: TrainingData,
           kind: str, size: int, resume: bool, show_progress: bool,
           on_estimate: Callable[[TuneEstimate], None] | None = None) -> dict[str, Any]:
    """``tune`` once the pairs are read and checked: the teacher's vectors, the trainer's run and
    the model saved."""
    finished = run_dir / "model" / "metrics.json"
    texts = distillation_texts(train, kind, settings)
    if texts:  # the sample as an earlier stage's (``distill_texts_from``), its teacher vectors
        # cached beside it here, where progress may be hidden, so that the trainer finds them
        sample_dir = run_dir / "distill" / "teacher"
        write_distillation_texts(sample_dir, texts, len(texts))
        teacher_vectors(str(settings.teacher), texts, sample_dir, show_progress=show_progress)
    plan = epoch_plan(len(data.pairs) // size, len(data.sts) // size, len(texts) // size, settings)
    config = tune_config(base, kind, plan, settings, run_dir / "distill" if texts else None)
    # the trainer reads no benchmark data here: the pairs are given, the dev figures replace STSb's
    trainer = Trainer(config, run_dir, run_dir, data,
                      dev_evaluation=lambda encoder: dev_figures(encoder.eval(), dev), device=settings.device)
    started = time.perf_counter()
    before = dev_figures(load_model(base).encoder.to(trainer.device), dev)
    if on_estimate is not None:
        done = _checkpoint_step(run_dir) if resume else 0
        on_estimate(estimate(plan.steps, settings.epochs, size, time.perf_counter() - started,
                             2 * len(dev), done))
    stop = BestEpoch(trainer.model.encoder, before["dev_score"])
    try:
        model = trainer.run(resume=resume, show_progress=show_progress, stop=stop)
    except (FileExistsError, ValueError) as err:  # a run directory in use, or another run's
        raise ModelError(f"{err} (--run-dir)") from None
    record = {"base": base, "pairs_file": str(pairs_file), "pairs_sha256": file_sha256(pairs_file),
              "dev_file": str(dev_file) if dev_file else None,
              "dev_sha256": file_sha256(dev_file) if dev_file else None,
              "train_pairs": len(data.pairs), "hard_negatives": len(data.hard_negatives),
              "scored_pairs": len(data.sts), "score_share": plan.score_share,
              "score_loss": config.training.sts_loss if data.sts else None,
              "teacher": config.data.distill_teacher or None, "distilled_texts": len(texts),
              "distill_share": config.training.distill_ratio,
              "steps": trainer.state.step, "stopped_early": stop.stopped,
              "before": before, "after": dev_figures(model.encoder.eval(), dev)}
    finished.write_text(json.dumps({**json.loads(finished.read_text()), "tune": record}, indent=2) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run_dir / "model", out)
    return record
