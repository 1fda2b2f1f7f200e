"""Training configuration, read from a committed TOML file (``train/configs/*.toml``)."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from askalike.core.errors import UserError

CONVERSATION_FILES = ("reddit_2015", "self_dialogue", "sgd", "chitchat", "cmu_dog", "dailydialog",
                      "ubuntu_irc", "twitter_small")
QATAR_LIVING_FILES = (
    "semeval-cqa/SemEval2016-Task3-CQA-QL-train-part2.xml",
    "semeval-cqa/extra-2015-reformatted/SemEval2015-Task3-CQA-QL-dev-reformatted-excluding-2016-questions-cleansed.xml",
    "semeval-cqa/extra-2015-reformatted/SemEval2015-Task3-CQA-QL-train-reformatted-excluding-2016-questions-cleansed.xml",
)


class ConfigError(UserError, ValueError):
    pass


@dataclass
class ModelConfig:
    kind: str = "dan"  # dan | transformer | cse | pretrained
    pretrained: str = "all-MiniLM-L6-v2"  # with kind = "pretrained"
    vocabulary_size: int = 50_000
    min_count: int = 2
    # count the vocabulary's words in the distillation sample (e.g. 1M texts, where rarer words
    # reach min_count) instead of in the training pairs
    vocabulary_from_distillation: bool = False
    oov_buckets: int = 1000
    bigram_buckets: int = 0
    glove: bool = False  # initialise word embeddings from GloVe 6B 50d (embedding_dim = 50)
    # a DAN's word embeddings from the distillation teacher's embeddings (train.teacher_init)
    teacher_init: bool = False
    # start from this saved model's encoder (same kind; its vocabulary is kept): a later stage
    initialise_from: str = ""
    encoder: dict[str, Any] = field(default_factory=dict)  # encoder constructor arguments


DISTILL_IN_DOMAIN = ("pairs", "nli", "stsb")


@dataclass
class DataConfig:
    conversations: list[str] = field(default_factory=lambda: list(CONVERSATION_FILES))
    max_pairs_per_file: int = 0  # 0: all
    qatar_living: list[str] = field(default_factory=lambda: list(QATAR_LIVING_FILES))
    nli: list[str] = field(default_factory=list)  # stems under nli/, or "sick_train"
    # copies of the CQA train split's labelled (original, relevant related question) pairs
    labelled_cqa_copies: int = 0
    # each copy of a labelled pair also carries one of its original's irrelevant related
    # questions as a hard negative (the next one for each copy), for the response objective
    cqa_hard_negatives: bool = False
    # those hard negatives read instead from a TSV of (original question id, negative text) rows,
    # best first, e.g. BM25's hits among the other train questions (python -m askalike.train.bm25_negatives)
    cqa_hard_negatives_from: str = ""
    stsb_train: bool = False  # the STS Benchmark train split's scored pairs ([training] sts_loss)
    # distillation: a teacher model ("pretrained:NAME" or a model directory) embeds this many
    # distinct texts drawn from the training pairs and NLI sentences
    distill_teacher: str = ""
    distill_sentences: int = 0
    # conversation files whose every training text (held-out tails excepted) joins the pool of
    # distillation texts, after the in-domain texts (training pairs, NLI, STS Benchmark train)
    distill_conversations: list[str] = field(default_factory=list)
    # the sample's in-domain texts appear this many times among the distillation items (1: once
    # like the others), so that a larger general pool does not dilute them
    distill_in_domain_copies: int = 1
    # which in-domain texts open the sample (DISTILL_IN_DOMAIN: the training pairs', the NLI and the
    # STS Benchmark train sentences); fewer, e.g. to distill a pretrained base back into its own
    # fine-tuning on general sentences only, none: the sample is the distill_conversations pool
    distill_in_domain: list[str] = field(default_factory=lambda: list(DISTILL_IN_DOMAIN))
    # instead of drawing a sample: the texts and cached teacher vectors of an earlier run's
    # teacher pass (RUN_DIR/teacher), e.g. a fine-tuning stage keeping its distillation term
    distill_texts_from: str = ""
    # NLI entailment pairs (premise, hypothesis) join the training pairs
    nli_entailment_pairs: bool = False
    # listwise distillation (train.listwise): each forum question (the CQA train split's and the
    # qatar_living threads') with this many of its nearest other questions; 0: none
    listwise_candidates: int = 0


@dataclass
class TrainingConfig:
    objective: str = "response"  # response | cse
    steps: int = 1000
    batch_size: int = 128
    learning_rate: float = 1e-3
    nli_ratio: float = 0.0  # share of steps that are NLI batches (multitask)
    nli_batch_size: int = 64
    distill_ratio: float = 0.0  # share of steps that are distillation batches (of batch_size texts)
    distill_scale: float = 20.0  # cosine scale in the distillation softmax
    # response head ff(r) = r + W2 tanh(W1 r), W2 starting at zero: scores start as the
    # encoder's own dot products, which keeps a pretrained encoder's geometry at the start
    residual_response_head: bool = False
    # share of steps that learn from scored pairs (stsb_train, or `tune`'s score column): the
    # cosine regressed on the score, or (ranking) each batch's cosines ordered as its scores (CoSENT)
    sts_ratio: float = 0.0
    sts_loss: str = "regression"  # regression | ranking
    # share of steps that are listwise distillation batches (batch_size // listwise_candidates
    # questions, each with its candidates; the cosines scaled by distill_scale)
    listwise_ratio: float = 0.0
    margin: float = 0.5  # CSE margin delta
    embedding_pull: float = 0.0  # CSE L2 pull of word embeddings to their initial values
    hard_negative_after: int = 0  # CSE: steps of hinges summed over all negatives before the hardest
    sparse_embeddings: bool = False  # sparse gradients + SparseAdam for the embedding tables
    max_grad_norm: float = 5.0
    eval_every: int = 500
    eval_pairs: int = 1000  # held-out pairs scored for P@N during training
    checkpoint_every: int = 100
    log_every: int = 10
    half_precision: bool = False  # save fp16 weights
    mixed_precision: bool = True  # on a GPU, compute in bf16 where autocast may (the CPU: float32)
    int8_embeddings: bool = False  # save the embedding tables as int8 rows, a scale each
    # train once under each of these seeds (RUN_DIR/seed-N) and keep the uniform average of their
    # weights as RUN_DIR/model (train.seed_average); empty: one run under the config's seed
    average_seeds: list[int] = field(default_factory=list)


@dataclass
class TrainConfig:
    name: str
    seed: int = 13
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# the TOML types each annotation takes (a float key takes an integer too; bool is not an int)
_TOML_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float),
                                            "bool": (bool,), "list[str]": (list,), "list[int]": (list,),
                                            "dict[str, Any]": (dict,)}
# keys that must be positive, or at least zero, or a share between 0 and 1
_POSITIVE = ("steps", "batch_size", "nli_batch_size", "learning_rate", "distill_scale",
             "max_grad_norm", "eval_every", "checkpoint_every", "log_every", "vocabulary_size",
             "min_count", "distill_in_domain_copies")
_NOT_NEGATIVE = ("oov_buckets", "bigram_buckets", "max_pairs_per_file", "labelled_cqa_copies",
                 "distill_sentences", "listwise_candidates", "margin", "embedding_pull",
                 "hard_negative_after", "eval_pairs")
_SHARES = ("nli_ratio", "distill_ratio", "sts_ratio", "listwise_ratio")


def _check_value(name: str, value: Any, annotation: str, where: str) -> None:
    expected = _TOML_TYPES.get(annotation)
    if expected is not None and (not isinstance(value, expected)
                                 or (isinstance(value, bool) and bool not in expected)):
        raise ConfigError(f"{where}: {name} = {value!r} must be {annotation}")
    if name in _POSITIVE and not value > 0:
        raise ConfigError(f"{where}: {name} = {value!r} must be positive")
    if name in _NOT_NEGATIVE and value < 0:
        raise ConfigError(f"{where}: {name} = {value!r} must not be negative")
    if name in _SHARES and not 0 <= value <= 1:
        raise ConfigError(f"{where}: {name} = {value!r} must be between 0 and 1")


def _section(cls: type, values: Any, where: str) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a table of keys, got {values!r}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(values) - set(known)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(known)})")
    for name, value in values.items():
        _check_value(name, value, str(known[name].type), where)
    return cls(**values)


def _check_encoder_settings(model: ModelConfig, where: str) -> None:
    """[model.encoder] holds the encoder's constructor arguments: refuse names it does not take
    and negative sizes here, not as a traceback after the data is read."""
    import inspect

    from askalike.train.modules import VOCABULARY_MODULES, PretrainedModule

    if model.initialise_from and model.encoder:
        raise ConfigError(f"{where}: a model started from initialise_from keeps its encoder's "
                          "settings; leave this section out")
    encoder_class = PretrainedModule if model.kind == "pretrained" else VOCABULARY_MODULES[model.kind]
    accepted = [name for name in inspect.signature(encoder_class).parameters
                if name not in ("vocabulary", "checkpoint")]
    unknown = sorted(set(model.encoder) - set(accepted))
    if unknown:
        raise ConfigError(f"{where}: unknown settings {unknown} for a {model.kind} encoder "
                          f"(it takes {accepted})")
    for name, value in model.encoder.items():
        numbers = value if isinstance(value, list) else [value]
        if any(isinstance(n, int | float) and not isinstance(n, bool) and n < 0 for n in numbers):
            raise ConfigError(f"{where}: {name} = {value!r} must not be negative")


def parse_config(values: dict[str, Any], where: str = "config") -> TrainConfig:
    values = dict(values)
    sections = {"model": ModelConfig, "data": DataConfig, "training": TrainingConfig}
    parsed = {name: _section(cls, values.pop(name, {}), f"{where} [{name}]")
              for name, cls in sections.items()}
    if "name" not in values:
        raise ConfigError(f"{where}: a config needs a name")
    config = _section(TrainConfig, values | parsed, where)
    if config.model.kind not in ("dan", "transformer", "cse", "pretrained"):
        raise ConfigError(f"{where}: unknown model kind {config.model.kind!r}")
    if config.training.objective not in ("response", "cse"):
        raise ConfigError(f"{where}: unknown objective {config.training.objective!r}")
    if config.training.sts_loss not in ("regression", "ranking"):
        raise ConfigError(f"{where}: unknown sts_loss {config.training.sts_loss!r} (regression | ranking)")
    if config.training.sparse_embeddings and config.model.kind == "pretrained":
        raise ConfigError(f"{where}: sparse_embeddings applies to encoders trained from scratch")
    distills = config.training.distill_ratio > 0
    data = config.data
    if distills != bool(data.distill_teacher and (data.distill_sentences or data.distill_texts_from)):
        raise ConfigError(f"{where}: distillation needs [training] distill_ratio > 0 together with "
                          "[data] distill_teacher and distill_sentences (or distill_texts_from)")
    if data.cqa_hard_negatives and not (data.labelled_cqa_copies and config.training.objective == "response"):
        raise ConfigError(f"{where}: [data] cqa_hard_negatives needs labelled_cqa_copies > 0 and the "
                          "response objective")
    if data.cqa_hard_negatives_from and not data.cqa_hard_negatives:
        raise ConfigError(f"{where}: [data] cqa_hard_negatives_from goes with cqa_hard_negatives = true")
    unknown_sources = sorted(set(data.distill_in_domain) - set(DISTILL_IN_DOMAIN))
    if unknown_sources:
        raise ConfigError(f"{where} [data]: distill_in_domain: unknown {unknown_sources} "
                          f"(known: {list(DISTILL_IN_DOMAIN)})")
    if data.distill_sentences and data.distill_texts_from:
        raise ConfigError(f"{where}: [data] distill_sentences draws a sample, distill_texts_from "
                          "reuses an earlier run's: choose one")
    if (config.training.listwise_ratio > 0) != (data.listwise_candidates > 0) or (
            data.listwise_candidates and not data.distill_teacher):
        raise ConfigError(f"{where}: [training] listwise_ratio > 0 goes with [data] "
                          "listwise_candidates > 0 and a distill_teacher")
    if data.listwise_candidates and not 2 <= data.listwise_candidates <= config.training.batch_size:
        raise ConfigError(f"{where}: [data] listwise_candidates = {data.listwise_candidates} must "
                          "be between 2 and [training] batch_size (a batch holds batch_size // "
                          "listwise_candidates questions)")
    # the other way round (sts_ratio > 0 without scored pairs) is the trainer's check: `tune`
    # gives it scored pairs of its own
    if config.data.stsb_train and config.training.sts_ratio == 0:
        raise ConfigError(f"{where}: [data] stsb_train = true needs [training] sts_ratio > 0")
    model = config.model
    if model.teacher_init and (model.kind != "dan" or not config.data.distill_teacher):
        raise ConfigError(f"{where}: [model] teacher_init needs kind = \"dan\" and a "
                          "[data] distill_teacher")
    if model.initialise_from and (model.teacher_init or model.glove):
        raise ConfigError(f"{where}: [model] initialise_from starts from a saved model's weights; "
                          "it goes without teacher_init and glove")
    if config.training.int8_embeddings and model.kind not in ("dan", "cse"):
        raise ConfigError(f"{where}: [training] int8_embeddings is for the numpy encoders (dan, cse); "
                          f"a {model.kind} model is exported to ONNX")
    if model.vocabulary_from_distillation and (not data.distill_sentences or model.initialise_from):
        raise ConfigError(f"{where}: [model] vocabulary_from_distillation needs a sample drawn by "
                          "[data] distill_sentences, and no initialise_from")
    _check_encoder_settings(model, f"{where} [model.encoder]")
    unknown = sorted(set(config.data.conversations + config.data.distill_conversations)
                     - set(CONVERSATION_FILES))
    if unknown:
        raise ConfigError(f"{where} [data]: unknown conversation files {unknown} "
                          f"(known: {list(CONVERSATION_FILES)})")
    training = config.training
    seeds = training.average_seeds
    if any(isinstance(s, bool) or not isinstance(s, int) for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where} [training]: average_seeds = {seeds!r} must be distinct integers")
    if sum(getattr(training, share) for share in _SHARES) > 1:
        raise ConfigError(f"{where}: {' + '.join(_SHARES)} exceed 1")
    return config


def load_config(path: Path) -> TrainConfig:
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: {err}") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    return parse_config(values, str(path))
