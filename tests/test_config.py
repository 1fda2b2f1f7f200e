"""Training configs: every committed config parses and names data that exists."""

from pathlib import Path

import pytest

from askalike.train.config import ConfigError, load_config, parse_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "train" / "configs").glob("*.toml"))


def test_configs_are_committed():
    assert len(CONFIGS) >= 5


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_committed_config_parses_and_its_data_exists(data_dir, path):
    config = load_config(path)
    assert config.name == path.stem
    for stem in config.data.conversations:
        assert (data_dir / "conversations" / f"{stem}.tsv.gz").is_file()
    for relative in config.data.qatar_living:
        assert (data_dir / relative).is_file()
    for name in config.data.nli:
        assert name == "sick_train" or (data_dir / "nli" / f"{name}.tsv.gz").is_file()


@pytest.mark.parametrize(("values", "message"), [
    ({"seed": 1}, "needs a name"),
    ({"name": "x", "model": {"kind": "rnn"}}, "unknown model kind"),
    ({"name": "x", "training": {"stepz": 3}}, "unknown keys"),
    ({"name": "x", "training": {"sts_loss": "cosent"}}, "unknown sts_loss 'cosent'"),
    ({"name": "x", "data": {"distill_conversations": ["redit"]}}, "unknown conversation files"),
    ({"name": "x", "data": {"distill_in_domain": ["pair"]}}, "distill_in_domain: unknown"),
    ({"name": "x", "model": {"teacher_init": True}}, "teacher_init needs"),
    ({"name": "x", "data": {"labelled_cqa_copies": 1, "cqa_hard_negatives_from": "n.tsv"}},
     "goes with cqa_hard_negatives = true"),
    ({"name": "x", "model": {"initialise_from": "runs/a/model", "glove": True}}, "goes without"),
    ({"name": "x", "model": {"encoder": {"residual_hiden": 8}}}, r"unknown settings \['residual_hiden'\]"),
    ({"name": "x", "model": {"encoder": {"hidden": [384, -1]}}}, r"hidden = \[384, -1\] must not"),
    ({"name": "x", "model": {"initialise_from": "runs/a/model", "encoder": {"hidden": [8]}}},
     "keeps its encoder's settings"),
    ({"name": "x", "model": {"vocabulary_from_distillation": True}}, "needs a sample drawn"),
    ({"name": "x", "model": {"kind": "transformer"}, "training": {"int8_embeddings": True}},
     "int8_embeddings is for the numpy encoders"),
    ({"name": "x", "data": {"distill_teacher": "t", "distill_sentences": 5, "distill_texts_from": "r"},
      "training": {"distill_ratio": 0.5}}, "choose one"),
    ({"name": "x", "data": {"stsb_train": True}}, "stsb_train = true needs"),
    ({"name": "x", "training": {"listwise_ratio": 0.2}}, "listwise_ratio > 0 goes with"),
    ({"name": "x", "data": {"listwise_candidates": 8}}, "listwise_ratio > 0 goes with"),
    ({"name": "x", "data": {"listwise_candidates": 8}, "training": {"listwise_ratio": 0.2}},
     "listwise_ratio > 0 goes with"),  # no teacher
    ({"name": "x", "data": {"listwise_candidates": 1, "distill_teacher": "t"},
      "training": {"listwise_ratio": 0.2}}, "listwise_candidates = 1 must be between 2"),
    ({"name": "x", "data": {"listwise_candidates": 80, "distill_teacher": "t"},
      "training": {"listwise_ratio": 0.2, "batch_size": 64}}, "between 2 and"),
    ({"name": "x", "data": {"listwise_candidates": 8, "distill_teacher": "t", "distill_sentences": 9},
      "training": {"listwise_ratio": 0.6, "distill_ratio": 0.5}}, "listwise_ratio exceed 1"),
])
def test_bad_configs_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(values)


def test_a_regression_share_without_scored_pairs_is_refused_when_the_tasks_are_built():
    """`tune` gives the trainer scored pairs of its own, so the config cannot tell; the tasks can."""
    import numpy as np

    from askalike.train.corpus import TrainingData
    from askalike.train.multitask import training_tasks
    from askalike.train.task_inputs import TaskInputs

    config = parse_config({"name": "x", "training": {"sts_ratio": 0.2}})
    inputs = TaskInputs([], None, np.arange(0), None)
    with pytest.raises(ValueError, match="sts_ratio > 0 needs scored pairs"):
        training_tasks(config.training, TrainingData([("a", "b")], [], []), None, inputs)


def test_unreadable_config(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("name = ")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load_config(path)
