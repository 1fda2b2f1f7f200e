"""Summaries people read: what index, index-info, delete, rerank and the evaluations print without
--json (a few lines; the detail is in --json), delete --exclude, and eval cqa's default mode."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from helpers import invoke, search_ids, write_bytes

from askalike.app.summaries import duration, megabytes, model_label
from askalike.core.model_dir import SHIPPED_MODELS_DIR, update_model_config

QUESTIONS = (b"id,subject,body,category\nq1,Renewing a residence permit,How long does it take?,Visas\n"
             b"q2,Residence permit renewal time,How many days?,Visas\nq3,Best beach for kids,Safe?,Leisure\n"
             b"q4,Cheap second-hand cars,Where?,Cars\n")
KEY_DUMP = re.compile(r"\b(True|False)\b|[a-z]+_[a-z]+ |\d\.\d{5,}")  # snake_case keys, 16-digit floats


def lines_of(result) -> list[str]:
    assert result.exit_code == 0, result.output
    assert not KEY_DUMP.search(result.stdout), result.stdout
    return result.stdout.splitlines()


@pytest.fixture
def indexed(tmp_path, tiny_model):
    source = write_bytes(tmp_path / "questions.csv", QUESTIONS)
    index_dir = tmp_path / "index"
    return source, index_dir, lines_of(invoke("index", source, "--model", tiny_model, "--index", index_dir))


def test_index_says_what_changed_the_type_and_why_and_the_rate(indexed, tiny_model):
    source, index_dir, first = indexed
    assert first[0] == f"{index_dir}: 4 questions; flat index (auto: exact search for 4 questions " \
                       "(flat up to 100,000))"
    assert first[1] == "read 4 questions from questions.csv: 4 added"
    assert re.fullmatch(rf"embedded 4 questions in [\d.]+ s \([\d,]+ a second\) with model {tiny_model}",
                        first[2])
    source.write_bytes(QUESTIONS.replace(b"Safe?", b"Safe for toddlers?").replace(b"Cars\n", b"Autos\n"))
    again = lines_of(invoke("index", source, "--index", index_dir))
    assert again[1] == ("read 4 questions from questions.csv: 1 embedded again (text changed), "
                        "1 updated (metadata only), 2 unchanged")
    dry = lines_of(invoke("index", source, "--index", index_dir, "--dry-run"))
    assert dry[0].startswith(f"Dry run, nothing written: {index_dir} would hold 4 questions")
    assert dry[1] == "read 4 questions from questions.csv: 4 unchanged"


def test_index_info_in_four_lines_sizes_in_mb_sources_by_file_name(indexed, tiny_model):
    _, index_dir, _ = indexed
    info = lines_of(invoke("index-info", "--index", index_dir))
    assert info[0] == f"{index_dir}: 4 questions; flat index, up to date"
    assert info[1] == "1 source: questions.csv (4)"
    assert info[2].startswith(f"model {tiny_model} (")
    assert re.match(r"[\d.]+ MB on disk \(FAISS [<\d. ]+ MB\), its own SQLite database, updated \d{4}-",
                    info[3])
    assert len(info) == 4


@pytest.mark.reliability("a question deleted, then its source file indexed again",
                         "`delete` says it comes back; with `delete --exclude` later runs leave it out "
                         "until `index --readmit`")
def test_delete_says_a_deleted_question_comes_back_and_exclude_keeps_it_out(indexed):
    source, index_dir, _ = indexed
    deleted = lines_of(invoke("delete", "q3", "--index", index_dir))
    assert deleted[0] == f"{index_dir}: deleted 1 question" and "--exclude" in deleted[1]
    back = json.loads(invoke("index", source, "--index", index_dir, "--json").stdout)
    assert (back["added"], back["excluded"]) == (1, 0)
    kept_out = invoke("delete", "q3", "q4", "--exclude", "--index", index_dir, "--json")
    assert json.loads(kept_out.stdout) == {"deleted": 2, "excluded": 2}
    rerun = json.loads(invoke("index", source, "--index", index_dir, "--json").stdout)
    assert (rerun["added"], rerun["excluded"], rerun["total"]) == (0, 2, 2)
    assert set(search_ids(index_dir, "beach cars permit", 10)) == {"q1", "q2"}
    summary = lines_of(invoke("index", source, "--index", index_dir))
    assert summary[1] == ("read 4 questions from questions.csv: 2 unchanged, "
                          "2 left out (deleted with --exclude)")
    readmitted = json.loads(invoke("index", source, "--index", index_dir, "--readmit", "--json").stdout)
    assert (readmitted["added"], readmitted["excluded"], readmitted["total"]) == (2, 0, 4)
    assert json.loads(invoke("index", source, "--index", index_dir, "--json").stdout)["excluded"] == 0


def test_rerank_and_eval_summaries_put_map_and_mrr_on_one_scale(data_dir, tiny_model, tmp_path):
    cqa = data_dir / "semeval-cqa"
    rerank = lines_of(invoke("rerank", cqa / "SemEval2016-Task3-CQA-QL-dev.xml", "--model", tiny_model,
                             "--out", tmp_path / "run.pred", "--gold",
                             cqa / "SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy"))
    assert rerank[0].startswith("reranked the related questions of 50 original questions with ")
    assert re.fullmatch(r"MAP \d\d\.\d\d, AvgRec \d\d\.\d\d, MRR \d\d\.\d\d \(x100\); in the input's "
                        r"order MAP 71\.35, AvgRec 86\.11, MRR 76\.67", rerank[1])
    sts = lines_of(invoke("eval", "sts", "--model", tiny_model, "--data-dir", data_dir))
    assert re.fullmatch(r"STS Benchmark dev \(raw\), .*: Pearson r -?0\.\d{3}, Spearman -?0\.\d{3} "
                        r"over 1,500 pairs", sts[0])
    assert sts[1].startswith("Pearson r by genre: captions ")


def test_eval_cqa_ranks_as_search_does_by_default_and_names_the_mode(data_dir, tiny_model, tmp_path):
    tuned = tmp_path / "tuned"
    shutil.copytree(tiny_model, tuned)
    update_model_config(tuned, hybrid_dense_weight=0.5)  # words help this model: hybrid by default
    common = ["eval", "cqa", "--split", "dev2016", "--data-dir", data_dir]
    modes = [json.loads(line)["mode"] for line in invoke(*common, "--model", tiny_model, "--model", tuned,
                                                           "--system", "ir", "--json").stdout.splitlines()]
    assert modes == [None, "dense", "hybrid"]
    table = invoke(*common, "--model", tuned, "--system", "ir").stdout
    assert "mode" in table and "hybrid" in table and "x100" in table


def test_figures_read_as_people_write_them():
    assert [megabytes(n) for n in (630, 46_308, 68_000_000)] == ["< 0.01 MB", "0.05 MB", "68.0 MB"]
    assert [duration(s) for s in (0.0898, 12.34, 125, 7300)] == ["0.09 s", "12.3 s", "2 min 5 s", "2 h 1 min"]
    assert model_label(str(SHIPPED_MODELS_DIR / "fast")) == "fast"
    assert model_label("/elsewhere/fast") == "/elsewhere/fast"
