"""Training data: conversation pairs (with a fixed held-out tail per file), in-domain Qatar
Living question -> comment pairs, and NLI pairs. Test files are never read here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from askalike.core.cqa_questions import read_cqa_threads, read_split_questions
from askalike.core.datasets import (
    NliPair,
    StsPair,
    read_conversations,
    read_hard_negatives,
    read_nli,
    read_sick,
    read_sts_benchmark,
    stsb_path,
)
from askalike.train.batching import text_key
from askalike.train.config import DataConfig

Pair = tuple[str, str]
HELDOUT_PER_FILE = 500  # the last pairs of each conversation file: never trained on, scored for P@N


@dataclass
class TrainingData:
    pairs: list[Pair]  # (input, response)
    heldout: list[Pair]  # for P@N; the last pairs of each conversation file
    nli: list[NliPair]
    sts: list[StsPair] = field(default_factory=list)  # scored pairs (STS Benchmark train)
    hard_negatives: dict[int, str] = field(default_factory=dict)  # pair index -> a wrong response
    forum_questions: list[str] = field(default_factory=list)  # for listwise distillation


def conversation_pairs(data_dir: Path, stem: str, max_pairs: int = 0) -> tuple[list[Pair], list[Pair]]:
    """(training pairs, held-out tail) of one conversation file."""
    path = data_dir / "conversations" / f"{stem}.tsv.gz"
    pairs = [(p.input, p.response) for p in read_conversations(path)]
    cut = max(len(pairs) - HELDOUT_PER_FILE, 0)
    train = pairs[:cut]
    return (train[:max_pairs] if max_pairs else train), pairs[cut:]


def qatar_living_pairs(data_dir: Path, files: list[str]) -> list[Pair]:
    """Each forum question (subject + body) with each of its comments."""
    pairs = []
    for relative in files:
        for thread in read_cqa_threads(data_dir / relative):
            if thread.text:
                pairs.extend((thread.text, c.text) for c in thread.comments if c.text.strip())
    return pairs


def forum_questions(data_dir: Path, files: list[str]) -> list[str]:
    """The distinct forum questions (subject + body) of the CQA train split (originals and
    related questions, never dev or test) and of the threads in ``files``, in file order."""
    questions: dict[str, str] = {}
    texts = [q.text for original in read_split_questions(data_dir, "train")
             for q in (original, *original.related)]
    texts += [thread.text for relative in files for thread in read_cqa_threads(data_dir / relative)]
    for text in texts:
        if key := text_key(text):
            questions.setdefault(key, text)
    return list(questions.values())


def labelled_cqa_pairs(data_dir: Path, negatives: Mapping[str, list[str]] | None = None,
                       ) -> list[tuple[Pair, list[str]]]:
    """(original question, related question) for every related question labelled PerfectMatch
    or Relevant in the CQA train split (train part 1 and part 2; never dev or test), each with
    its original's related questions labelled Irrelevant, or its entry in ``negatives`` (by
    original question id) where those are given."""
    labelled = []
    for original in read_split_questions(data_dir, "train"):
        wrong = ([related.text for related in original.related
                  if related.relevant is False and related.text.strip()]
                 if negatives is None else negatives.get(original.id, []))
        labelled += [((original.text, related.text), wrong) for related in original.related
                     if related.relevant and related.text.strip()]
    return labelled


def nli_pairs(data_dir: Path, names: list[str]) -> list[NliPair]:
    result: list[NliPair] = []
    for name in names:
        if name == "sick_train":
            result.extend(NliPair(p.entailment.lower(), p.sentence1, p.sentence2)
                          for p in read_sick(data_dir / "sick" / "SICK_train.txt", "train"))
        elif name.startswith(("snli_1.0", "cad_snli_dev", "cad_snli_test")):
            raise ValueError(f"{name}: an NLI evaluation set (or one that overlaps SNLI dev/test) "
                             "cannot be training data")
        else:
            result.extend(read_nli(data_dir / "nli" / f"{name}.tsv.gz"))
    return result


def load_training_data(data_dir: Path, config: DataConfig) -> TrainingData:
    pairs: list[Pair] = []
    heldout: list[Pair] = []
    for stem in config.conversations:
        train, held = conversation_pairs(data_dir, stem, config.max_pairs_per_file)
        pairs += train
        heldout += held
    pairs += qatar_living_pairs(data_dir, config.qatar_living)
    hard_negatives: dict[int, str] = {}
    mined = (read_hard_negatives(Path(config.cqa_hard_negatives_from))
             if config.cqa_hard_negatives_from else None)
    labelled = labelled_cqa_pairs(data_dir, mined) if config.labelled_cqa_copies else []
    for copy in range(config.labelled_cqa_copies):
        for pair, negatives in labelled:
            if config.cqa_hard_negatives and negatives:
                hard_negatives[len(pairs)] = negatives[copy % len(negatives)]
            pairs.append(pair)
    nli = nli_pairs(data_dir, config.nli)
    if config.nli_entailment_pairs:
        pairs += [(pair.premise, pair.hypothesis) for pair in nli if pair.label == "entailment"]
    sts = list(read_sts_benchmark(stsb_path(data_dir, "train"))) if config.stsb_train else []
    questions = forum_questions(data_dir, config.qatar_living) if config.listwise_candidates else []
    return TrainingData(pairs, heldout, nli, sts, hard_negatives, questions)
