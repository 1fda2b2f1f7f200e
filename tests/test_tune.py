"""``askalike tune`` and its pair files; the out-of-domain figures (``core.ood_evaluation``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from askalike.core.ood_evaluation import OOD_DOMAINS, domain_part, ranking_accuracy
from askalike.core.pair_files import read_labelled_pairs
from askalike.retrieval.judgement import SameQuestionJudge, model_judge
from askalike.train.pair_tuning import (
    EpochPlan,
    TuneSettings,
    epoch_plan,
    split_dev,
    training_data,
    tune_config,
)
from tests.helpers import assert_one_line_error, index, invoke, make_tiny_model

TOPICS = ["visa", "car", "pizza", "school", "flight", "rent", "salary", "beach", "doctor", "phone"]


def write_scored_pairs(path: Path, count: int = 400) -> Path:
    """Pairs graded 1-5 (SICK's scale): 5 for the same topic and number, 3 for the same topic, 1
    for neither; labels on the ends only."""
    rows = ["text_a,text_b,label,score"]
    for i in range(count):
        topic, other = TOPICS[i % len(TOPICS)], TOPICS[(i + 3) % len(TOPICS)]
        rows += [f"question {i} about my {topic},{topic} help number {i},1,5",
                 f"question {i} about my {topic},{topic} help number {i + 7},,3"]
        if i % 2:
            rows.append(f"question {i} about my {topic},{other} help number {i + 1},0,1")
    path.write_text("\n".join(rows) + "\n")
    return path


def write_pairs(path: Path, count: int = 400) -> Path:
    """Alike pairs that share a topic word and a number, and not-alike ones that do not."""
    rows = ["text_a,text_b,label"]
    for i in range(count):
        topic, other = TOPICS[i % len(TOPICS)], TOPICS[(i + 3) % len(TOPICS)]
        rows.append(f"question {i} about my {topic},{topic} help number {i},1")
        if i % 2:
            rows.append(f"question {i} about my {topic},{other} help number {i + 1},0")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_pair_files_read_labels_and_groups(tmp_path):
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('text_a,text_b,label\n"a, b",c,1\nd,e,0\nf,g,\n')
    assert [(p.text_a, p.label) for p in read_labelled_pairs(csv_file)] == [("a, b", 1), ("d", 0), ("f", 1)]
    semicolons = tmp_path / "semicolons.csv"  # the separators `index` reads, from the header
    semicolons.write_text("text_a;text_b;label\nVPN drops, again;VPN disconnects;1\n")
    read = read_labelled_pairs(semicolons)
    assert [(p.text_a, p.text_b) for p in read] == [("VPN drops, again", "VPN disconnects")]
    groups = tmp_path / "groups.jsonl"
    groups.write_text("\n".join(json.dumps({"text": t, "group": g})
                                for t, g in [("x", "1"), ("y", "1"), ("z", "1"), ("w", "2")]) + "\n")
    assert {(p.text_a, p.text_b) for p in read_labelled_pairs(groups)} == {("x", "y"), ("x", "z"), ("y", "z")}


def test_scores_are_rescaled_over_the_file_and_a_row_without_a_label_is_scored_only(tmp_path):
    scored = tmp_path / "scored.csv"
    scored.write_text("text_a,text_b,label,score\na,b,1,4.5\nc,d,,3\ne,f,0,\ng,h,0,1.5\n")
    assert [(p.label, p.score) for p in read_labelled_pairs(scored)] == [
        (1, 1.0), (None, 0.5), (0, None), (0, 0.0)]
    graded = tmp_path / "graded.jsonl"  # scores alone, numbers in JSON
    graded.write_text("".join(json.dumps({"text_a": a, "text_b": "x", "score": s}) + "\n"
                              for a, s in [("a", 0), ("b", 2.5), ("c", 5)]))
    read = read_labelled_pairs(graded)
    assert [(p.label, p.score) for p in read] == [(None, 0.0), (None, 0.5), (None, 1.0)]


@pytest.mark.parametrize(("kind", "settings", "loss"), [
    ("transformer", TuneSettings(), "ranking"), ("pretrained", TuneSettings(), "ranking"),
    ("dan", TuneSettings(), "regression"), ("dan", TuneSettings(score_loss="ranking"), "ranking"),
    ("transformer", TuneSettings(score_loss="regression"), "regression")])
def test_scores_are_learned_by_rank_in_a_transformer_and_by_regression_in_a_dan(kind, settings, loss):
    config = tune_config("models/base", kind, EpochPlan(7, 5 / 7, 0.0), settings)
    assert config.training.sts_loss == loss and config.training.sts_ratio == 5 / 7


def test_scored_pairs_become_the_scored_pairs_task_with_its_share_of_the_steps(tmp_path):
    pairs = read_labelled_pairs(write_scored_pairs(tmp_path / "pairs.csv", 32))
    data = training_data(pairs)
    assert len(data.pairs) == 32 and len(data.sts) == 80  # 32 alike, 32 + 16 scored only / not alike
    assert {p.score for p in data.sts} == {0.0, 2.5, 5.0}  # StsPair's 0-5 scale
    assert epoch_plan(2, 5, 0, TuneSettings()) == EpochPlan(7, 5 / 7, 0.0)  # batches of 16
    assert epoch_plan(2, 5, 0, TuneSettings(score_share=0.3)) == EpochPlan(7, 0.3, 0.0)
    assert epoch_plan(0, 1, 0, TuneSettings()) == EpochPlan(1, 1.0, 0.0)  # no full batch of alike pairs
    assert epoch_plan(2, 0, 0, TuneSettings(score_share=0.3)) == EpochPlan(2, 0.0, 0.0)  # no scores
    assert epoch_plan(2, 4, 4, TuneSettings()) == EpochPlan(10, 0.4, 0.4)  # and a teacher's texts
    assert epoch_plan(0, 1, 3, TuneSettings()) == EpochPlan(4, 0.25, 0.75)


@pytest.mark.reliability("a pair file with a bad label, an empty text or the wrong columns",
                         "one error line naming the file, line and field; nothing written")
@pytest.mark.parametrize(("content", "pattern"), [
    ("text_a,text_b,label\na,b,1\nc,d,yes\n", r"pairs\.csv:3: field 'label' must be 1"),
    ("text_a,text_b\na,b\n,d\n", r"pairs\.csv:3: field 'text_a' is empty"),
    ("question,answer\na,b\n", r"pairs\.csv:2: needs the columns text_a, text_b"),
    ("text_a,text_b,label\na,b,0\n", r"pairs\.csv: no alike pairs"),
    ("text_a,text_b,label,score\na,b,1,4\nc,d,0,high\n", r"pairs\.csv:3: field 'score' must be a number"),
    ("text_a,text_b,score\na,b,4\nc,d,nan\n", r"pairs\.csv:3: field 'score' must be a number"),
    ("text_a,text_b,label,score\na,b,1,4\nc,d,,\n", r"pairs\.csv:3: fields 'label' and 'score' are both"),
    ("text_a,text_b,score\na,b,3\nc,d,3\n", r"pairs\.csv: field 'score' is 3 on every row"),
    ("text_a,text_b\n" + "".join(f"q{i},r{i}\n" for i in range(30)), r"pairs\.csv: \d+ alike pairs"),
])
def test_bad_pair_files_get_one_line_errors(tmp_path, tiny_model, content, pattern):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text(content)
    result = invoke("tune", tiny_model, "--pairs", pairs, "--out", tmp_path / "out")
    assert_one_line_error(result, pattern)
    assert not (tmp_path / "out").exists()


@pytest.mark.reliability("`tune` on pairs that cannot teach: one pair repeated 100 times (with and "
                         "without --dev), and 100 pairs of a text with itself",
                         "one error line saying what is wrong with the pairs (one first text; two "
                         "different texts; the same text on both sides); no OUT nor OUT.run left behind")
@pytest.mark.parametrize(("rows", "dev", "pattern"), [
    (["my vpn drops,vpn disconnects,1"] * 100, False,
     r"0 alike pairs fall in the held-out 10%.*the 100 pairs have 1 different first text;"),
    (["my vpn drops,vpn disconnects,1"] * 100, True,
     r"100 alike pairs to learn from, but not one batch of 8 pairs without a text twice: they hold 2 "
     r"different texts"),
    ([f"question {i},question {i},1" for i in range(100)], True,
     r"100 have the same text on both sides, which teaches nothing"),
])
def test_pairs_that_cannot_teach_are_named(tmp_path, tiny_model, rows, dev, pattern):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("text_a,text_b,label\n" + "\n".join(rows) + "\n")
    result = invoke("tune", tiny_model, "--pairs", pairs, "--out", tmp_path / "out",
                    *(["--dev", pairs] if dev else []))
    assert_one_line_error(result, pattern)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.run").exists()


def test_not_alike_pairs_become_hard_negatives_of_their_first_text(tmp_path):
    pairs = read_labelled_pairs(write_pairs(tmp_path / "pairs.csv", 10))
    data = training_data(pairs)
    assert len(data.pairs) == 10
    assert data.hard_negatives[1] == "flight help number 2"  # pair 1's first text, its rewrite


def test_ranking_accuracy_counts_alike_above_not_alike():
    assert ranking_accuracy(np.array([0.9, 0.2, 0.5, 0.1]), [1, 0, 1, None]) == 1.0
    assert ranking_accuracy(np.array([0.3, 0.5, 0.4]), [1, 0, 1]) == 0.0
    assert ranking_accuracy(np.array([0.5, 0.5]), [1, 0]) == 0.5


def test_domain_parts_are_fixed_and_disjoint(data_dir):
    for domain in OOD_DOMAINS:
        tune_part, test_part = domain_part(data_dir, domain, "tune"), domain_part(data_dir, domain, "test")
        assert not {p.sentence1 for p in tune_part} & {p.sentence1 for p in test_part}
        assert 0.3 < len(tune_part) / (len(tune_part) + len(test_part)) < 0.5


@pytest.mark.slow
def test_tune_raises_the_dev_figure_and_writes_a_model_that_indexes(tmp_path, tiny_model):
    pairs = write_pairs(tmp_path / "pairs.csv")
    out = tmp_path / "tuned"
    result = invoke("tune", tiny_model, "--pairs", pairs, "--out", out, "--epochs", "3",
                    "--learning-rate", "0.01", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["after"]["dev_score"] > record["before"]["dev_score"]
    metrics = json.loads((out / "metrics.json").read_text())["tune"]
    assert metrics["pairs_sha256"] == record["pairs_sha256"] and metrics["hard_negatives"] > 0
    # the match of the tuned model is calibrated on the held-out pairs (both labels, 10+ each)
    judge = model_judge(out)
    assert isinstance(judge, SameQuestionJudge) and judge.fitted_on == "your held-out pairs"
    assert record["same_question"]["fitted_on"] == judge.fitted_on and record["same_question"]["pairs"] >= 20
    source = tmp_path / "questions.csv"
    source.write_text("id,subject,body\nq1,my visa,help\nq2,my car,help\n")
    assert index(source, tmp_path / "index", out)["model"].endswith("tuned")


@pytest.mark.slow
@pytest.mark.parametrize("score_loss", ["ranking", "regression"])
def test_tune_on_scored_pairs_measures_pearson_r_and_learns_from_the_scores(tmp_path, tiny_model, score_loss):
    pairs = write_scored_pairs(tmp_path / "pairs.csv", 200)
    result = invoke("tune", tiny_model, "--pairs", pairs, "--out", tmp_path / "tuned", "--epochs", "2",
                    "--learning-rate", "0.01", "--score-loss", score_loss, "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    before, after = record["before"], record["after"]
    assert before["dev_score"] == pytest.approx((before["dev_ranking_accuracy"] + before["dev_pearson"]) / 2)
    assert after["dev_pearson"] > before["dev_pearson"] and after["dev_score"] > before["dev_score"]
    assert record["scored_pairs"] > record["train_pairs"] and 0 < record["score_share"] < 1
    assert record["score_loss"] == score_loss
    log = [json.loads(line) for line in (tmp_path / "tuned.run" / "metrics.jsonl").read_text().splitlines()]
    assert {"sts", "response"} <= {entry.get("task") for entry in log}


@pytest.mark.slow
def test_a_dan_given_a_teacher_also_distills_it_on_the_training_texts(tmp_path, tiny_model):
    teacher = make_tiny_model(tmp_path / "teacher", seed=1)
    pairs = write_scored_pairs(tmp_path / "pairs.csv", 100)
    result = invoke("tune", tiny_model, "--pairs", pairs, "--out", tmp_path / "tuned", "--epochs", "1",
                    "--teacher", teacher, "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    train, _ = split_dev(read_labelled_pairs(pairs))
    texts = {text for pair in train for text in (pair.text_a, pair.text_b)}
    assert record["teacher"] == str(teacher) and record["distilled_texts"] == len(texts)
    assert 0 < record["distill_share"] < 1 and 0 < record["score_share"] < 1
    log = [json.loads(line) for line in (tmp_path / "tuned.run" / "metrics.jsonl").read_text().splitlines()]
    assert "distill" in {entry.get("task") for entry in log}


def test_only_a_dan_distills_a_teacher(tmp_path, tiny_model):
    result = invoke("tune", "pretrained:all-MiniLM-L6-v2", "--pairs", write_pairs(tmp_path / "pairs.csv"),
                    "--out", tmp_path / "out", "--teacher", tiny_model)
    assert_one_line_error(result, r"a teacher distills into a DAN base")


@pytest.mark.slow
def test_a_resumed_tune_keeps_where_the_run_stopped(tmp_path, tiny_model):
    pairs = write_pairs(tmp_path / "pairs.csv")
    common = ("--pairs", pairs, "--run-dir", tmp_path / "run", "--learning-rate", "0.01", "--json")
    first = invoke("tune", tiny_model, "--out", tmp_path / "a", *common)
    again = invoke("tune", tiny_model, "--out", tmp_path / "b", "--resume", *common)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["after"] == json.loads(first.stdout)["after"]
    weights = [(tmp_path / name / "model.safetensors").read_bytes() for name in "ab"]
    assert weights[0] == weights[1]


@pytest.mark.slow
def test_collection_words_missing_from_a_dan_get_rows_of_their_own(tmp_path, tiny_model):
    source = tmp_path / "desk.csv"
    source.write_text("id,subject,body\n" + "".join(f"q{i},kerberos ticket {i},renew the kerberos ticket\n"
                                                     for i in range(5)))
    out = tmp_path / "adapted"
    result = invoke("tune", tiny_model, "--collection", source, "--out", out, "--teacher", tiny_model,
                    "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["new_words"] == 3  # kerberos, ticket, renew
    from askalike.core.loader import load_encoder

    adapted, base = load_encoder(out), load_encoder(tiny_model)
    assert adapted.knows_words("kerberos") and not base.knows_words("kerberos")
    assert np.allclose(adapted.encode(["visa fees"]), base.encode(["visa fees"]), atol=0.02)


@pytest.mark.slow
def test_a_pretrained_peer_runs_its_own_fp32_weights(tmp_path, monkeypatch):
    """Figures called a peer's are the peer's: its export is not the int8 variant."""
    from askalike.core.loader import load_encoder
    from askalike.train.trained_model import export_once, load_model

    monkeypatch.setenv("ASKALIKE_CACHE", str(tmp_path / "cache"))
    export_once("pretrained:all-MiniLM-L6-v2")
    texts = ["How long does a residence permit renewal take?", "Where can I buy a cheap used car?"]
    exported = load_encoder("pretrained:all-MiniLM-L6-v2").encode(texts)
    reference = load_model("pretrained:all-MiniLM-L6-v2").encoder.encode(texts)
    assert np.min(np.sum(exported * reference, axis=1)) > 0.99999


@pytest.mark.reliability("`askalike export pretrained:NAME --quantize`",
                         "refused in one line: a peer's figures stay its own fp32 model's")
def test_a_peer_is_never_quantised_in_place():
    assert_one_line_error(invoke("export", "pretrained:all-MiniLM-L6-v2", "--quantize"), r"own fp32 model")


def test_eval_domains_reports_each_domain_and_caches_the_vectors(tmp_path, monkeypatch, tiny_model, data_dir):
    monkeypatch.setenv("ASKALIKE_CACHE", str(tmp_path / "cache"))
    first = invoke("eval", "domains", "--model", tiny_model, "--data-dir", data_dir, "--json")
    assert first.exit_code == 0, first.output
    figures = json.loads(first.stdout)
    assert set(figures) == {"model", "part", *OOD_DOMAINS, "mean"}
    assert figures["sick"]["pairs"] == len(domain_part(data_dir, "sick", "test"))
    assert len(list((tmp_path / "cache" / "ood").glob("*.npy"))) == len(OOD_DOMAINS)
    again = invoke("eval", "domains", "--model", tiny_model, "--data-dir", data_dir, "--json")
    assert json.loads(again.stdout) == figures


@pytest.mark.slow
def test_tune_tells_a_person_what_it_learned_the_figures_and_what_to_run_next(tmp_path, tiny_model):
    from test_summaries import lines_of

    out = tmp_path / "tuned"
    lines = lines_of(invoke("tune", tiny_model, "--pairs", write_scored_pairs(tmp_path / "pairs.csv", 200),
                            "--out", out, "--epochs", "1", "--learning-rate", "0.01"))
    assert re.fullmatch(rf"tuned {re.escape(str(tiny_model))} on pairs\.csv in \d+ steps: [\d,]+ alike "
                        r"pairs, [\d,]+ not-alike as hard negatives, [\d,]+ scored pairs by regression",
                        lines[0]), lines[0]
    assert re.fullmatch(r"held out \(10% of the pairs: \d+ pairs\), before -> after:", lines[1])
    assert [line.split()[0] for line in lines[2:5]] == ["pair", "Pearson", "alike"]
    assert all(re.search(r"\d%? -> \d", line) for line in lines[2:5])
    assert lines[-1] == f"saved {out}: use it with `askalike index FILE --model {out}`"


def test_adapting_to_a_collection_names_the_new_words(tmp_path, tiny_model):
    from test_summaries import lines_of

    source = tmp_path / "desk.csv"
    source.write_text("id,subject,body\n" + "".join(f"q{i},kerberos ticket {i},renew the kerberos ticket\n"
                                                     for i in range(5)))
    lines = lines_of(invoke("tune", tiny_model, "--collection", source, "--out", tmp_path / "adapted",
                            "--teacher", tiny_model))
    assert lines[0].startswith(f"gave {tiny_model} 3 new words of 5 texts, their rows from {tiny_model}: ")
    words = set(lines[0].split(": ")[1].split(", "))
    assert len(words) == 3 and {"kerberos", "ticket"} < words  # and one more the tiny vocabulary lacks
    again = lines_of(invoke("tune", tmp_path / "adapted", "--collection", source, "--out", tmp_path / "again",
                            "--teacher", tiny_model))
    assert again[0].endswith("already holds the frequent words of 5 texts: nothing to add")


def test_the_summary_reads_the_record_of_a_run_from_before_scores_and_teachers():
    """``tune --resume`` of a run that had ended returns its record as it was written."""
    from askalike.app.summaries import tune_summary

    figures = {"dev_pairs": 40, "dev_ranking_accuracy": 0.9, "dev_top1": 0.5, "dev_score": 0.9}
    old = {"base": "models/fast", "pairs_file": "runs/pairs.csv", "dev_file": None, "train_pairs": 300,
           "hard_negatives": 0, "steps": 90, "before": figures, "after": {**figures, "dev_score": 0.95}}
    assert tune_summary(old, "my-model")[0] == "tuned models/fast on pairs.csv in 90 steps: 300 alike pairs"


@pytest.mark.slow
def test_tune_says_how_long_it_will_take_before_it_starts(tmp_path, tiny_model):
    pairs = write_pairs(tmp_path / "pairs.csv")
    result = invoke("tune", tiny_model, "--pairs", pairs, "--out", tmp_path / "tuned", "--epochs", "2",
                    "--learning-rate", "0.01")
    assert result.exit_code == 0, result.output
    assert re.search(r"tuning: about [\d.]+ (s|min \d+ s) an epoch on this machine, up to [\d.]+ (s|min "
                     r"\d+ s) for 2 epochs; the bar shows the time left\. Ctrl-C stops; `--resume` then "
                     r"continues", " ".join(result.stderr.split())), result.stderr


def test_the_estimate_counts_each_step_s_texts_and_what_a_resumed_run_has_left():
    from askalike.train.pair_tuning import STEP_COST, estimate

    planned = estimate(steps_per_epoch=10, epochs=3, batch=8, dev_seconds=2.0, dev_texts=40)
    assert planned.epoch_seconds == pytest.approx(10 * 2 * 8 * (2.0 / 40) * STEP_COST + 2.0)
    assert planned.total_seconds == pytest.approx(3 * planned.epoch_seconds)
    resumed = estimate(10, 3, 8, 2.0, 40, done_steps=15)
    assert resumed.total_seconds == pytest.approx(1.5 * planned.epoch_seconds)


@pytest.mark.reliability("Ctrl-C during `tune`", "exit 130 saying whether a checkpoint was kept and that "
                         "--resume continues it")
@pytest.mark.parametrize("checkpointed", [True, False])
def test_an_interrupted_tune_says_how_to_resume(tmp_path, tiny_model, monkeypatch, checkpointed):
    from askalike.train.pair_tuning import CHECKPOINT_FILE
    from askalike.train.trainer import Trainer

    def interrupted(self, **_):
        if checkpointed:
            (self.run_dir / CHECKPOINT_FILE).write_bytes(b"a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "run", interrupted)
    result = invoke("tune", tiny_model, "--pairs", write_pairs(tmp_path / "pairs.csv"), "--out",
                    tmp_path / "tuned", "--run-dir", tmp_path / "run")
    assert result.exit_code == 130
    said = " ".join(result.stderr.split())
    if checkpointed:
        assert f"the run so far is kept in {tmp_path / 'run'}; run the same command with --resume" in said
    else:
        assert "interrupted before the first checkpoint" in said and not (tmp_path / "run").exists()
    assert not (tmp_path / "tuned").exists()


@pytest.mark.reliability("a tuned model that scores one held-out figure below its base",
                         "a warning naming the figure, before and after (never silent)")
def test_a_figure_that_falls_is_said():
    from askalike.app.summaries import tune_summary

    before = {"dev_pairs": 40, "dev_ranking_accuracy": 0.90, "dev_top1": 0.929, "dev_score": 0.90}
    after = {"dev_pairs": 40, "dev_ranking_accuracy": 0.95, "dev_top1": 0.886, "dev_score": 0.95}
    record = {"base": "models/fast", "pairs_file": "pairs.csv", "dev_file": None, "train_pairs": 300,
              "hard_negatives": 0, "steps": 90, "before": before, "after": after}
    lines = tune_summary(record, "tuned")
    warning = next(line for line in lines if line.startswith("warning: "))
    assert "alike partner nearest fell from 92.9% to 88.6%" in warning
    assert not any(line.startswith("warning") for line in tune_summary({**record, "after": before}, "t"))
