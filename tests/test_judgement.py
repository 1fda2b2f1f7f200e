"""The same-question judge (``retrieval.judgement``): a calibrated probability from the cosine,
recorded with the model and used by search in every mode, ``similar`` and the calibration
figures (``retrieval.calibration``)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import collection, index, invoke, write_jsonl

from askalike.core.model_dir import ModelError, read_model_config, update_model_config
from askalike.retrieval.calibration import JudgedPair, fit_judge
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.judgement import (
    CONFIG_KEY,
    SAME_QUESTION,
    SameQuestionJudge,
    UncalibratedJudge,
    calibration_error,
    fit_platt,
    model_judge,
    record_judge,
)
from askalike.retrieval.searcher import Searcher


def test_platt_scaling_recovers_the_curve_that_made_the_verdicts():
    rng = np.random.default_rng(0)
    cosines = rng.uniform(0, 1, 20_000)
    truth = SameQuestionJudge(12.0, -9.0)
    same = rng.uniform(0, 1, cosines.size) < truth.probability(cosines)
    slope, intercept = fit_platt(cosines, same)
    assert slope == pytest.approx(12.0, rel=0.1) and intercept == pytest.approx(-9.0, rel=0.1)
    fitted = SameQuestionJudge(slope, intercept)
    assert calibration_error(fitted.probability(cosines), same) < 0.02
    with pytest.raises(ValueError, match="both kinds: 0 same"):
        fit_platt(cosines, np.zeros(cosines.size, dtype=bool))


def test_calibration_error_is_the_weighted_gap_of_each_bin():
    # bin 0.8-0.9: mean probability 0.85, 1 of 2 the same: a gap of 0.35 over half the pairs;
    # bin 0.1-0.2: 0.15 against 0 of 2: 0.15 over the other half
    assert calibration_error([0.85, 0.85, 0.15, 0.15], [True, False, False, False]) == pytest.approx(0.25)
    assert calibration_error([1.0, 0.0], [True, False]) == 0.0


def test_a_threshold_on_the_match_is_one_on_the_cosine():
    judge = SameQuestionJudge(10.0, -7.0)
    for probability in (0.1, 0.5, 0.93):
        assert judge.probability(judge.cosine_for(probability)) == pytest.approx(probability)
    assert judge.cosine_for(0.0) == -np.inf and judge.cosine_for(1.0) == np.inf
    uncalibrated = UncalibratedJudge()
    assert uncalibrated.cosine_for(0.8) == 0.8 and uncalibrated.probability(-0.3) == 0.0


@pytest.fixture
def calibrated_model(tmp_path, tiny_model):
    model = tmp_path / "calibrated"
    shutil.copytree(tiny_model, model)
    record_judge(model, SameQuestionJudge(8.0, -4.0, "a test curve", {"pairs": 2}))
    return model


def test_the_judge_is_recorded_in_the_models_config_beside_its_other_keys(calibrated_model, tiny_model):
    assert model_judge(calibrated_model) == SameQuestionJudge(8.0, -4.0, "a test curve", {"pairs": 2})
    assert read_model_config(calibrated_model)["kind"] == read_model_config(tiny_model)["kind"]
    assert isinstance(model_judge(tiny_model), UncalibratedJudge)
    update_model_config(calibrated_model, **{CONFIG_KEY: {"platt": {"slope": -1, "intercept": 0}}})
    with pytest.raises(ModelError, match=r"slope -1\.0: match must rise with the cosine"):
        model_judge(calibrated_model)
    update_model_config(calibrated_model, **{CONFIG_KEY: {"slope": 1}})
    with pytest.raises(ModelError, match="is not a calibration"):
        model_judge(calibrated_model)


@pytest.mark.parametrize("mode", list(SearchMode))
def test_search_shows_the_calibrated_match_in_every_mode_even_for_a_lone_candidate(
        tmp_path, calibrated_model, mode):
    records = collection(30)
    index(write_jsonl(tmp_path / "q.jsonl", records), tmp_path / "index", calibrated_model)
    judge = model_judge(calibrated_model)
    # the query's words are those of one question only: lexical has one candidate, and hybrid's
    # min-max over one candidate used to show it 0%
    query = records[7]["subject"] + " " + records[7]["body"]
    with Searcher(tmp_path / "index") as searcher:
        results = searcher.search(query, 1, mode=mode)
    assert results[0].external_id == "q7"
    assert results[0].match == pytest.approx(float(judge.probability(results[0].cosine)))
    assert 0.9 < results[0].match < 0.99  # cosine ~1 on this curve: 1 / (1 + e^-4) = 0.98


def test_similar_gives_the_match_and_the_verdict(calibrated_model):
    result = invoke("similar", "visa renewal in doha", "visa renewal in doha", "--model", calibrated_model,
                    "--json")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["same_question"] is True
    assert figures["match"] == pytest.approx(1 / (1 + np.exp(-4)), abs=1e-3)
    text = invoke("similar", "visa renewal in doha", "visa renewal in doha", "--model", calibrated_model)
    assert "98% match: the same question" in text.stdout


def test_a_judge_is_fitted_on_pairs_of_both_kinds_and_says_what_it_measured(tiny_model):
    from askalike.core.loader import load_encoder

    records = collection(40)
    texts = [f"{r['subject']} {r['body']}" for r in records]
    pairs = ([JudgedPair(text, text + " please", True) for text in texts[:20]]
             + [JudgedPair(texts[i], texts[i + 20], False) for i in range(20)])
    judge = fit_judge(load_encoder(tiny_model), pairs, "forty test pairs")
    assert judge.slope > 0 and judge.fitted_on == "forty test pairs"
    assert judge.figures["pairs"] == 40 and judge.figures["same"] == 20
    assert 0.0 <= judge.figures["calibration_error"] <= 1.0
    with pytest.raises(ValueError, match="at least 10 pairs of each kind"):
        fit_judge(load_encoder(tiny_model), pairs[:25], "too few")
    assert SAME_QUESTION == 0.5


def test_calibrate_records_the_curve_fitted_on_a_pairs_file_and_a_dry_run_records_nothing(
        tmp_path, tiny_model):
    from test_cli import assert_documented

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    records = collection(40)
    texts = [f"{r['subject']} {r['body']}" for r in records]
    rows = ([(text, text + " please", 1) for text in texts[:20]]
            + [(texts[i], texts[i + 20], 0) for i in range(20)])
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"text_a": a, "text_b": b, "label": label}) + "\n"
                             for a, b, label in rows))
    dry = invoke("calibrate", "--model", model, "--pairs", pairs, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert_documented(json.loads(dry.stdout), "calibrate --json")
    assert isinstance(model_judge(model), UncalibratedJudge)  # nothing written
    done = invoke("calibrate", "--model", model, "--pairs", pairs, "--json")
    figures = json.loads(done.stdout)
    judge = model_judge(model)
    assert figures["recorded"] is True and figures["pairs"] == 40 and figures["same"] == 20
    assert (round(judge.slope, 4), round(judge.intercept, 4)) == (figures["slope"], figures["intercept"])
    assert judge.fitted_on == "pairs.jsonl: your pairs"
    missing = invoke("calibrate", "--model", model, "--pairs", tmp_path / "none.csv")
    assert missing.exit_code == 2 and "none.csv" in missing.stderr and model_judge(model) == judge


def test_calibrate_refuses_pairs_of_one_kind_in_one_line(tmp_path, tiny_model):
    pairs = tmp_path / "few.csv"
    pairs.write_text("text_a,text_b,label\nvisa renewal,renewing a visa,1\n")
    result = invoke("calibrate", "--model", tiny_model, "--pairs", pairs)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "at least 10 pairs of each kind: 1 are the same question, 0 are not" in result.stderr
