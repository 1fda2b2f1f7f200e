"""Training machinery: short runs learn, resume is exact (kill -9 included), DDP matches."""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from askalike.core.datasets import read_nli, read_sts_benchmark, stsb_path
from askalike.core.text import Vocabulary
from askalike.train.config import ConfigError, parse_config
from askalike.train.corpus import TrainingData, conversation_pairs, load_training_data
from askalike.train.evaluation import response_precision
from askalike.train.multitask import ResponseSelection
from askalike.train.seed_average import train_seed_average
from askalike.train.trained_model import load_model, save_model
from askalike.train.trainer import Trainer

ENCODERS = {
    "dan": {"embedding_dim": 64, "hidden": [128, 128]},
    "transformer": {"hidden": 64, "layers": 2, "heads": 4, "filter_size": 128, "max_length": 32,
                    "dropout": 0.1},
    "cse": {"embedding_dim": 64, "maps": 50, "max_length": 32},
}


def small_config(kind: str, objective: str = "response", steps: int = 150, **training):
    return parse_config(small_settings(kind, objective, steps, **training))


def small_settings(kind: str, objective: str = "response", steps: int = 150, **training) -> dict:
    return {
        "name": f"test-{kind}", "seed": 7,
        "model": {"kind": kind, "vocabulary_size": 8000, "bigram_buckets": 4000 if kind == "dan" else 0,
                  "encoder": ENCODERS[kind]},
        "data": {"conversations": [], "qatar_living": []},
        "training": {"objective": objective, "steps": steps, "batch_size": 64,
                     "learning_rate": 1e-3 if kind == "transformer" else 5e-3,
                     "eval_every": 10_000, "checkpoint_every": 10_000, "eval_pairs": 500,
                     "margin": 0.3, **training},
    }


@pytest.fixture(scope="module")
def dialog_data(data_dir) -> TrainingData:
    """8,000 task-oriented dialogue pairs (SGD) and the file's 500 held-out pairs."""
    train, heldout = conversation_pairs(data_dir, "sgd")
    return TrainingData(train[:8000], heldout, [])


SHORT_RUNS = {
    "dan": small_config("dan", steps=300, learning_rate=1e-2, sparse_embeddings=True),
    "transformer": small_config("transformer", learning_rate=2e-3),
    # hardest negatives from the start collapse CSE to one point; warm up on the summed hinge
    "cse": small_config("cse", objective="cse", steps=300, learning_rate=5e-2, hard_negative_after=150),
}


@pytest.mark.parametrize("kind", SHORT_RUNS)
@pytest.mark.slow
def test_short_training_improves_p_at_1(data_dir, dialog_data, tmp_path, kind):
    trainer = Trainer(SHORT_RUNS[kind], data_dir, tmp_path, dialog_data)
    untrained = response_precision(trainer.trained_model(), dialog_data.heldout)["p@1"]
    model = trainer.run(show_progress=False)
    trained = model.metrics["response"]["p@1"]
    assert trained > untrained + 0.02, (untrained, trained)
    assert load_model(tmp_path / "model").encoder.encode(["hello"]).shape == (1, model.encoder.dim)


@pytest.mark.slow
def test_multitask_with_nli_runs_both_heads(data_dir, dialog_data, tmp_path):
    nli = list(read_nli(data_dir / "nli" / "cad_snli_train.tsv.gz"))[:640]
    data = TrainingData(dialog_data.pairs[:2000], dialog_data.heldout, nli)
    trainer = Trainer(small_config("dan", steps=40, nli_ratio=0.5, nli_batch_size=32), data_dir,
                      tmp_path, data)
    start = trainer.model.nli_head.classifier[0].weight.detach().clone()
    trainer.run(show_progress=False)
    assert not torch.equal(start, trainer.model.nli_head.classifier[0].weight)
    tasks = {line for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"nli"' in line}
    assert tasks


@pytest.mark.slow
def test_distillation_and_sts_tasks_train_and_resume_exactly(data_dir, dialog_data, tmp_path):
    """A student distilled from a (tiny) teacher with STS regression beside: every task runs,
    the teacher pass is cached, and an interrupted run resumes bit-exactly."""
    teacher = Trainer(small_config("dan", steps=1), data_dir, tmp_path / "teacher",
                      TrainingData(dialog_data.pairs[:500], [], []))
    save_model(teacher.trained_model(), tmp_path / "teacher-model")
    data = TrainingData(dialog_data.pairs[:1000], dialog_data.heldout, [],
                        list(read_sts_benchmark(stsb_path(data_dir, "train")))[:640])

    def config(steps: int):
        settings = small_settings("dan", steps=steps, checkpoint_every=5, log_every=1,
                                  distill_ratio=0.4, sts_ratio=0.3)
        settings["data"] |= {"distill_teacher": str(tmp_path / "teacher-model"),
                             "distill_sentences": 700, "stsb_train": True}
        return parse_config(settings)

    Trainer(config(12), data_dir, tmp_path / "straight", data).run(show_progress=False)
    tasks = {json.loads(line).get("task") for line in
             (tmp_path / "straight/metrics.jsonl").read_text().splitlines()}
    assert {"distill", "sts", "response"} <= tasks
    Trainer(config(7), data_dir, tmp_path / "resumed", data).run(show_progress=False)
    Trainer(config(12), data_dir, tmp_path / "resumed", data).run(resume=True, show_progress=False)
    straight, resumed = _weights(tmp_path / "straight/model"), _weights(tmp_path / "resumed/model")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


@pytest.mark.slow
def test_listwise_distillation_trains_from_cached_teacher_lists_and_resumes_exactly(
        data_dir, dialog_data, tmp_path):
    """Forum questions with their candidate lists (the teacher's vectors cached beside the
    distillation sample's, the lists saved in the run): the task runs, and a resumed run reads
    its lists back and ends bit-exactly where an uninterrupted run does."""
    teacher = Trainer(small_config("dan", steps=1), data_dir, tmp_path / "teacher",
                      TrainingData(dialog_data.pairs[:500], [], []))
    save_model(teacher.trained_model(), tmp_path / "teacher-model")
    questions = list(dict.fromkeys(a for a, _ in dialog_data.pairs[:400]))
    data = TrainingData(dialog_data.pairs[:1000], dialog_data.heldout, [], forum_questions=questions)

    def config(steps: int):
        settings = small_settings("dan", steps=steps, checkpoint_every=5, log_every=1,
                                  distill_ratio=0.3, listwise_ratio=0.4)
        settings["data"] |= {"distill_teacher": str(tmp_path / "teacher-model"),
                             "distill_sentences": 300, "listwise_candidates": 8}
        return parse_config(settings)

    straight = Trainer(config(12), data_dir, tmp_path / "straight", data)
    listwise = straight.tasks["listwise"]
    assert listwise.batch_size == 64 // 8 and listwise.candidates.shape == (len(questions), 8)
    first, second, labels = listwise.batch([0, 1])
    assert first == questions[:2] and len(second) == 16 and labels.shape == (2, 8)
    assert list((tmp_path / "straight/teacher").glob("listwise-*.npy"))
    straight.run(show_progress=False)
    tasks = [json.loads(line).get("task") for line in
             (tmp_path / "straight/metrics.jsonl").read_text().splitlines()]
    assert tasks.count("listwise") >= 2
    Trainer(config(7), data_dir, tmp_path / "resumed", data).run(show_progress=False)
    resumed_trainer = Trainer(config(12), data_dir, tmp_path / "resumed", data)
    saved = np.load(tmp_path / "resumed/listwise-candidates.npy")
    assert np.array_equal(saved, listwise.candidates)
    assert np.array_equal(resumed_trainer.tasks["listwise"].candidates, saved)
    resumed_trainer.run(resume=True, show_progress=False)
    straight_weights, resumed = _weights(tmp_path / "straight/model"), _weights(tmp_path / "resumed/model")
    assert all(torch.equal(straight_weights[k], resumed[k]) for k in straight_weights)
    np.save(tmp_path / "resumed/listwise-candidates.npy", saved[:, ::-1])  # the file, not a rebuild
    again = Trainer(config(12), data_dir, tmp_path / "resumed", data).tasks["listwise"]
    assert np.array_equal(again.candidates, saved[:, ::-1])


def test_a_vocabulary_counted_in_the_distillation_sample_has_its_words(data_dir, dialog_data, tmp_path):
    """vocabulary_from_distillation: the words come from the whole sample (here the pairs plus
    DailyDialog texts), not from the training pairs alone."""
    teacher = Trainer(small_config("dan", steps=1), data_dir, tmp_path / "teacher",
                      TrainingData(dialog_data.pairs[:300], [], []))
    save_model(teacher.trained_model(), tmp_path / "teacher-model")
    settings = small_settings("dan", steps=1, distill_ratio=0.5)
    settings["model"] |= {"vocabulary_size": 100_000, "vocabulary_from_distillation": True}
    settings["data"] |= {"distill_teacher": str(tmp_path / "teacher-model"), "distill_sentences": 3000,
                         "distill_conversations": ["dailydialog"]}
    pairs = dialog_data.pairs[:200]
    trainer = Trainer(parse_config(settings), data_dir, tmp_path / "run", TrainingData(pairs, [], []))
    sample = json.loads((tmp_path / "run/teacher/texts.json").read_text())
    from_sample = Vocabulary.build(sample, 100_000, 2)
    assert trainer.model.encoder.vocabulary.words == from_sample.words
    assert len(from_sample.words) > len(Vocabulary.build((t for p in pairs for t in p), 100_000, 2).words)


def test_a_later_stage_starts_from_the_earlier_model_and_reuses_its_teacher_pass(
        data_dir, dialog_data, tmp_path):
    """Stage 2 (initialise_from + distill_texts_from) starts from stage 1's weights and distills
    on stage 1's texts from its cache: the teacher is not run again (here it is gone)."""
    teacher = Trainer(small_config("dan", steps=1), data_dir, tmp_path / "teacher",
                      TrainingData(dialog_data.pairs[:300], [], []))
    save_model(teacher.trained_model(), tmp_path / "teacher-model")
    first = small_settings("dan", steps=3, distill_ratio=0.5)
    first["data"] |= {"distill_teacher": str(tmp_path / "teacher-model"), "distill_sentences": 300}
    data = TrainingData(dialog_data.pairs[:600], dialog_data.heldout, [])
    Trainer(parse_config(first), data_dir, tmp_path / "stage1", data).run(show_progress=False)
    chunks = sorted((tmp_path / "stage1/teacher").glob("chunk-*.npy"))
    shutil.rmtree(tmp_path / "teacher-model")

    second = small_settings("dan", steps=2, distill_ratio=0.5)
    second["model"] = {"kind": "dan", "initialise_from": str(tmp_path / "stage1/model")}
    second["data"] |= {"distill_teacher": str(tmp_path / "teacher-model"),
                       "distill_texts_from": str(tmp_path / "stage1"), "distill_in_domain_copies": 3}
    stage2 = Trainer(parse_config(second), data_dir, tmp_path / "stage2", data)
    stage1_weights = _weights(tmp_path / "stage1/model")
    assert torch.allclose(stage2.model.encoder.words.weight,
                          stage1_weights["encoder.words.weight"].float())
    distill = stage2.tasks["distill"]
    assert distill.texts == json.loads((tmp_path / "stage1/teacher/texts.json").read_text())
    # stage 1's sample is all in-domain (it has no general pool): each text appears three times
    assert json.loads((tmp_path / "stage1/teacher/in_domain.json").read_text()) == {"in_domain": 300}
    assert np.array_equal(np.bincount(distill.items), np.full(300, 3))
    stage2.run(show_progress=False)
    assert sorted((tmp_path / "stage1/teacher").glob("chunk-*.npy")) == chunks


def test_nli_entailment_pairs_join_the_training_pairs(data_dir):
    config = parse_config({"name": "x", "data": {"conversations": [], "qatar_living": [],
                                                 "nli": ["sick_train"], "nli_entailment_pairs": True}})
    data = load_training_data(data_dir, config.data)
    entailed = [(p.premise, p.hypothesis) for p in data.nli if p.label == "entailment"]
    assert entailed and data.pairs == entailed


def test_labelled_cqa_pairs_carry_their_originals_irrelevant_questions_as_hard_negatives(data_dir):
    config = parse_config({"name": "x", "data": {"conversations": [], "qatar_living": [],
                                                 "labelled_cqa_copies": 2, "cqa_hard_negatives": True}})
    data = load_training_data(data_dir, config.data)
    assert len(data.pairs) == 2 * 1083 and len(data.hard_negatives) > 2 * 900
    copies = len(data.pairs) // 2
    first = next(i for i in data.hard_negatives if i < copies)
    assert data.pairs[first] == data.pairs[first + copies]  # the same pair in the second copy
    # each copy takes the next irrelevant question of its original
    first_copy = [i for i in data.hard_negatives if i < copies]
    assert any(data.hard_negatives[i] != data.hard_negatives[i + copies] for i in first_copy)
    task = ResponseSelection(data.pairs, [], 4, data.hard_negatives)
    assert task.batch([first])[1] == [data.pairs[first][1], data.hard_negatives[first]]
    # a negative that is a text of the batch is left out: it would be a second right answer
    task = ResponseSelection(data.pairs, [], 4, {first: data.pairs[first][1]})
    assert task.batch([first])[1] == [data.pairs[first][1]]


def test_hard_negatives_read_from_a_file_replace_the_threads_irrelevant_questions(data_dir, tmp_path):
    path = tmp_path / "negatives.tsv"
    path.write_text("original_id\tnegative\nQ1\tfirst mined\nQ1\tsecond mined\n")
    config = parse_config({"name": "x", "data": {
        "conversations": [], "qatar_living": [], "labelled_cqa_copies": 2, "cqa_hard_negatives": True,
        "cqa_hard_negatives_from": str(path)}})
    data = load_training_data(data_dir, config.data)
    copies = len(data.pairs) // 2
    # only Q1's pairs carry negatives, the file's, the next one for each copy
    first_copy = sorted(i for i in data.hard_negatives if i < copies)
    assert first_copy and {data.hard_negatives[i] for i in first_copy} == {"first mined"}
    assert {data.hard_negatives[i + copies] for i in first_copy} == {"second mined"}
    assert len(data.hard_negatives) == 2 * len(first_copy)


def test_a_checkpoint_written_before_a_config_key_existed_still_resumes():
    from askalike.train.trainer import _resumable

    current = small_config("dan").as_dict()
    older = {**current, "data": {k: v for k, v in current["data"].items() if k != "cqa_hard_negatives"}}
    assert _resumable(older) == _resumable(current)
    changed = {**current, "data": {**current["data"], "labelled_cqa_copies": 3}}
    assert _resumable(changed) != _resumable(current)


def test_hard_negatives_need_labelled_pairs_and_the_response_objective():
    with pytest.raises(ConfigError, match="cqa_hard_negatives needs labelled_cqa_copies"):
        parse_config({"name": "x", "data": {"cqa_hard_negatives": True}})


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return load_file(str(model_dir / "model.safetensors"))


@pytest.mark.parametrize("kind, training", [("transformer", {}),
                                             ("dan", {"sparse_embeddings": True})])
@pytest.mark.slow
def test_resume_is_exact(data_dir, dialog_data, tmp_path, kind, training):
    config = small_config(kind, steps=12, checkpoint_every=5, **training)
    data = TrainingData(dialog_data.pairs[:1000], dialog_data.heldout, [])
    Trainer(config, data_dir, tmp_path / "straight", data).run(show_progress=False)

    interrupted = Trainer(small_config(kind, steps=12, checkpoint_every=5, **training), data_dir,
                          tmp_path / "resumed", data)
    interrupted.config.training.steps = 7  # stops after the step-5 checkpoint and two more steps
    interrupted.run(show_progress=False)
    Trainer(config, data_dir, tmp_path / "resumed", data).run(resume=True, show_progress=False)

    straight, resumed = _weights(tmp_path / "straight/model"), _weights(tmp_path / "resumed/model")
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


KILL_CONFIG = """
name = "kill-test"
seed = 3
[model]
kind = "dan"
vocabulary_size = 5000
bigram_buckets = 2000
[model.encoder]
embedding_dim = 32
hidden = [64]
[data]
conversations = ["twitter_small"]
qatar_living = []
[training]
steps = 60
batch_size = 32
eval_every = 100000
checkpoint_every = 4
"""


def _train(config: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "askalike.app", "train", str(config), "--run-dir",
                             str(run_dir), *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.reliability("kill -9 during training (between checkpoints)",
                         "`--resume` continues from the last checkpoint; final weights equal an "
                         "uninterrupted run's")
@pytest.mark.slow
def test_kill_9_then_resume_matches_an_uninterrupted_run(data_dir, tmp_path):
    config = tmp_path / "kill.toml"
    config.write_text(KILL_CONFIG)
    assert _train(config, tmp_path / "clean").wait(timeout=300) == 0
    victim = _train(config, tmp_path / "killed")
    log = tmp_path / "killed" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or log.read_text().count("\n") < 3):
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert (tmp_path / "killed" / "checkpoint.pt").exists()
    assert not (tmp_path / "killed" / "model").exists()
    resumed = _train(config, tmp_path / "killed", "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
    clean, killed = _weights(tmp_path / "clean/model"), _weights(tmp_path / "killed/model")
    assert all(torch.equal(clean[k], killed[k]) for k in clean)


CHECKPOINT_HEAVY_CONFIG = KILL_CONFIG.replace("bigram_buckets = 2000", "bigram_buckets = 300000").replace(
    "steps = 60", "steps = 12").replace("checkpoint_every = 4", "checkpoint_every = 1")


@pytest.mark.reliability("kill -9 while a training checkpoint is being written",
                         "the last complete checkpoint is kept (written to a temporary file, fsynced, "
                         "renamed); `--resume` ends with weights equal to an uninterrupted run's")
@pytest.mark.slow
def test_kill_9_during_checkpoint_writes(data_dir, tmp_path):
    """A checkpoint of ~90 MB after every step, so that kills land mid-write (a leftover
    temporary checkpoint proves it)."""
    config = tmp_path / "heavy.toml"
    config.write_text(CHECKPOINT_HEAVY_CONFIG)
    assert _train(config, tmp_path / "clean").wait(timeout=300) == 0
    run_dir = tmp_path / "killed"
    rng = random.Random(5)
    mid_write = 0
    for _ in range(3):
        victim = _train(config, run_dir, *(["--resume"] if (run_dir / "checkpoint.pt").exists() else []))
        partial = run_dir / f".checkpoint.pt.{victim.pid}.tmp"  # core/files.py: temporary_name
        deadline = time.time() + 120
        while time.time() < deadline and victim.poll() is None and not partial.exists():
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.02))  # somewhere inside the write
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        mid_write += partial.exists()
    assert mid_write >= 2, "the kills did not land during checkpoint writes"
    resumed = _train(config, run_dir, "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
    assert not list(run_dir.glob(".*.tmp"))  # the killed runs' partial checkpoints are removed
    clean, killed = _weights(tmp_path / "clean/model"), _weights(run_dir / "model")
    assert all(torch.equal(clean[k], killed[k]) for k in clean)


# ------------------------------------------------------------------ distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gradients(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}


def _ddp_worker(rank: int, world: int, port: int, objective: str, data_dir: Path,
                pairs: list, out: Path) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    trainer = Trainer(small_config("dan", objective, steps=1), data_dir, out / f"rank{rank}",
                      TrainingData(pairs, [], []))
    batch = trainer._local(pairs[:16])
    trainer.step(objective, [a for a, _ in batch], [b for _, b in batch])
    if rank == 0:
        torch.save(_gradients(trainer), out / "ddp.pt")
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("objective", ["response", "cse"])
@pytest.mark.slow
def test_two_process_ddp_gradient_equals_the_global_batch_gradient(data_dir, dialog_data, tmp_path,
                                                                   objective):
    """Each worker holds 8 of 16 pairs; with negatives gathered across workers, the averaged
    DDP gradient equals a single process's gradient on all 16."""
    pairs = dialog_data.pairs[:400]
    mp.spawn(_ddp_worker, args=(2, _free_port(), objective, data_dir, pairs, tmp_path), nprocs=2)
    single = Trainer(small_config("dan", objective, steps=1), data_dir, tmp_path / "single",
                     TrainingData(pairs, [], []))
    single.step(objective, [a for a, _ in pairs[:16]], [b for _, b in pairs[:16]])
    expected, distributed = _gradients(single), torch.load(tmp_path / "ddp.pt")
    assert expected.keys() == distributed.keys() and expected
    for name, gradient in expected.items():
        assert torch.allclose(gradient, distributed[name], rtol=1e-4, atol=1e-7), name


@pytest.mark.slow
def test_a_seed_average_trains_each_seed_and_keeps_the_mean_of_their_saved_weights(
        data_dir, dialog_data, tmp_path):
    config = small_config("dan", steps=4, average_seeds=[3, 4])
    data = TrainingData(dialog_data.pairs[:600], dialog_data.heldout, [])
    train_seed_average(config, data_dir, tmp_path, data=data, show_progress=False)
    members = [_weights(tmp_path / f"seed-{seed}/model") for seed in (3, 4)]
    assert not torch.equal(members[0]["encoder.words.weight"], members[1]["encoder.words.weight"])
    assert json.loads((tmp_path / "seed-4/model/metrics.json").read_text())["steps"] == 4
    averaged = _weights(tmp_path / "model")
    for key, value in averaged.items():
        mean = (members[0][key].float() + members[1][key].float()) / 2
        assert torch.allclose(value.float(), mean, atol=1e-6), key
    # resumed, the finished members are read back, not trained again: the same average
    saved = [(tmp_path / f"seed-{seed}/model/model.safetensors").stat().st_mtime_ns for seed in (3, 4)]
    train_seed_average(config, data_dir, tmp_path, resume=True, data=data, show_progress=False)
    assert [(tmp_path / f"seed-{seed}/model/model.safetensors").stat().st_mtime_ns
            for seed in (3, 4)] == saved
    assert all(torch.equal(value, _weights(tmp_path / "model")[key]) for key, value in averaged.items())
    with pytest.raises(FileExistsError):
        train_seed_average(config, data_dir, tmp_path, data=data, show_progress=False)


def test_average_seeds_must_be_distinct_integers():
    for seeds in ([1, 1], [1, "2"], [True]):
        with pytest.raises(ConfigError, match="average_seeds"):
            small_config("dan", average_seeds=seeds)


def test_a_sample_of_chosen_in_domain_texts_leaves_the_others_out(data_dir, dialog_data):
    """distill_in_domain (e.g. distilling a pretrained base back in on general sentences): the
    sample's first group holds the named sources only; none gives the general pool alone."""
    from askalike.core.datasets import NliPair
    from askalike.train.task_inputs import distillation_pool

    nli = [NliPair("entailment", "A dog runs in a park.", "An animal is outside.")]
    data = TrainingData(dialog_data.pairs[:50], [], nli)
    settings = small_settings("dan", steps=1, distill_ratio=0.5)
    settings["data"] |= {"distill_teacher": "pretrained:all-MiniLM-L6-v2", "distill_sentences": 100,
                         "distill_conversations": ["dailydialog"]}
    pair_texts = {text for pair in data.pairs for text in pair}
    stsb = {pair.sentence1 for pair in read_sts_benchmark(stsb_path(data_dir, "train"))}
    every = distillation_pool(data, data_dir, parse_config(settings))
    assert pair_texts | stsb | {"A dog runs in a park."} <= set(every[0])
    settings["data"]["distill_in_domain"] = ["nli", "stsb"]
    general = distillation_pool(data, data_dir, parse_config(settings))
    assert not pair_texts & set(general[0])
    assert stsb | {"A dog runs in a park.", "An animal is outside."} <= set(general[0])
    assert general[1] == every[1]
    settings["data"]["distill_in_domain"] = []
    assert distillation_pool(data, data_dir, parse_config(settings))[0] == []
