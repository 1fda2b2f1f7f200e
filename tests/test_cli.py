"""The askalike command line: figures, JSON, prediction files and one-line errors."""

import json
import re
import shutil

import pytest
import typer
from helpers import documented_schema, runner

from askalike.app.cli import app
from askalike.retrieval.cqa_runs import read_cqa_run
from askalike.retrieval.scorer import all_scores_line, score_run


def test_eval_cqa_json(data_dir):
    result = runner.invoke(app, ["eval", "cqa", "--split", "test2017", "--system", "ir", "--json",
                                 "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["map"] == 0.4185
    assert figures["n_queries"] == 88
    assert {"mrr", "avgrec"} <= figures.keys()


def test_eval_cqa_writes_predictions_that_score_the_same(data_dir, tmp_path):
    out = tmp_path / "bm25.pred"
    result = runner.invoke(app, ["eval", "cqa", "--split", "dev2016", "--system", "bm25",
                                 "--out", str(out), "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    gold = read_cqa_run(data_dir / "semeval-cqa/SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy")
    rescored = score_run(gold, read_cqa_run(out))
    assert all_scores_line(rescored) in result.output

    scored = runner.invoke(app, ["score", str(gold_path(data_dir)), str(out), "--json"])
    assert json.loads(scored.output)["map"] == round(rescored.system.map, 4)


def gold_path(data_dir):
    return data_dir / "semeval-cqa/SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy"


def test_several_splits_and_systems_print_a_table(data_dir):
    result = runner.invoke(app, ["eval", "cqa", "--split", "dev2016", "--split", "test2016",
                                 "--system", "ir", "--system", "random", "--json",
                                 "--data-dir", str(data_dir)])
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(row["split"], row["system"]) for row in rows] == [
        ("dev2016", "ir"), ("dev2016", "random"), ("test2016", "ir"), ("test2016", "random")]


def test_data_dir_from_environment(data_dir, tmp_path):
    result = runner.invoke(app, ["eval", "cqa", "--split", "dev2016", "--system", "ir"],
                           env={"ASKALIKE_DATA": str(tmp_path)})
    assert result.exit_code == 2
    assert "semeval-cqa" in result.output and "file not found" in result.output
    assert "Traceback" not in result.output


def test_malformed_prediction_file_is_one_line_error(data_dir, tmp_path):
    bad = tmp_path / "bad.pred"
    bad.write_text("Q268\tQ268_R1\t1\t0.5\ttrue\nQ268\tQ268_R2\t1\n")
    result = runner.invoke(app, ["score", str(gold_path(data_dir)), str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:2: expected 5 fields" in result.output.replace("\n", "")


def test_out_needs_a_single_combination(data_dir, tmp_path):
    result = runner.invoke(app, ["eval", "cqa", "--split", "dev2016", "--system", "ir",
                                 "--system", "bm25", "--out", str(tmp_path / "x.pred"),
                                 "--data-dir", str(data_dir)])
    assert result.exit_code != 0
    assert not (tmp_path / "x.pred").exists()


def test_index_info_check_round_trip(tmp_path, tiny_model):
    source = tmp_path / "q.jsonl"
    source.write_text('{"id": "a", "subject": "visa renewal"}\n{"id": "b", "subject": "cheap cars"}\n')
    index = str(tmp_path / "index")
    result = runner.invoke(app, ["index", str(source), "--model", str(tiny_model), "--index", index,
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["added"] == 2
    info = json.loads(runner.invoke(app, ["index-info", "--index", index, "--json"]).stdout)
    assert info["questions"] == 2 and info["index_type"] == "flat"
    check = runner.invoke(app, ["check", "--index", index, "--json"])
    assert check.exit_code == 0 and json.loads(check.stdout)["ok"] is True


def test_index_bad_row_exits_2_naming_the_line(tmp_path, tiny_model):
    source = tmp_path / "q.csv"
    source.write_text('id,subject\n1,fine\n2,"broken"quote\n')
    result = runner.invoke(app, ["index", str(source), "--model", str(tiny_model),
                                 "--index", str(tmp_path / "index")])
    assert result.exit_code == 2
    assert "q.csv:3: broken quoting" in result.stderr and "Traceback" not in result.output
    skipping = runner.invoke(app, ["index", str(source), "--model", str(tiny_model), "--on-error", "skip",
                                   "--index", str(tmp_path / "index")])
    assert skipping.exit_code == 2 and "not even --on-error skip can go past it" in skipping.stderr


def test_check_fails_on_a_damaged_index(tmp_path, tiny_model):
    source = tmp_path / "q.txt"
    source.write_text("visa renewal\ncheap cars\n")
    index = tmp_path / "index"
    assert runner.invoke(app, ["index", str(source), "--model", str(tiny_model), "--index",
                               str(index), "--json"]).exit_code == 0
    (faiss_file,) = index.glob("vectors-*.faiss")
    faiss_file.write_bytes(b"garbage")
    result = runner.invoke(app, ["check", "--index", str(index)])
    assert result.exit_code == 1 and "check --repair" in result.stdout
    assert runner.invoke(app, ["check", "--index", str(index), "--repair"]).exit_code == 0


@pytest.mark.slow
def test_eval_card_records_dev_figures_that_eval_cqa_and_sts_reproduce(data_dir, tiny_model, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    common = ["--model", str(model), "--data-dir", str(data_dir), "--json"]
    card = runner.invoke(app, ["eval", "card", "--write", *common])
    assert card.exit_code == 0, card.output
    figures = json.loads(card.output)
    recorded = json.loads((model / "metrics.json").read_text())["evaluation"]
    assert recorded == {k: v for k, v in figures.items() if k != "model"}
    assert set(recorded["cqa_map"]) == {"dev2016"} and set(recorded["stsb"]) == {"dev"}  # no test split
    weight = json.loads((model / "config.json").read_text())["hybrid_dense_weight"]
    assert weight == recorded["hybrid_dense_weight"] and 0.0 <= weight <= 1.0
    assert recorded["hybrid_cqa_map"]["dev2016"] >= recorded["cqa_map"]["dev2016"]  # tuned there

    cqa = runner.invoke(app, ["eval", "cqa", "--split", "dev2016", "--mode", "dense", "--mode", "hybrid",
                              *common])
    dense, hybrid = (json.loads(line) for line in cqa.output.splitlines())
    assert dense["map"] == recorded["cqa_map"]["dev2016"]
    assert (dense["system"], dense["mode"]) == (str(model), "dense")
    assert hybrid["map"] == recorded["hybrid_cqa_map"]["dev2016"] and hybrid["mode"] == "hybrid"
    sts = runner.invoke(app, ["eval", "sts", "--split", "dev", "--tuned", *common])
    assert json.loads(sts.output)["pearson"] == recorded["stsb"]["dev"]["tuned"]


def _command_paths(group, prefix=()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, command in group.commands.items() if hasattr(group, "commands") else ():
        paths += _command_paths(command, (*prefix, name))
    return paths


@pytest.mark.parametrize("path", _command_paths(typer.main.get_command(app)), ids=" ".join)
def test_help_reads_cleanly(path):
    """Flags read as flags, and no default written in the help text is lost to Rich markup."""
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert not re.search(r"\S \.(?=\s)", result.output), result.output  # what "[default: x]" markup left
    assert "--no-json" not in result.output


JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict,
              "array": list, "null": type(None)}


def assert_documented(output: dict, title: str) -> None:
    schema = documented_schema(title)
    assert set(schema["required"]) <= output.keys() <= schema["properties"].keys()
    for key, value in output.items():
        types = schema["properties"][key]["type"]
        allowed = tuple(JSON_TYPES[name] for name in ([types] if isinstance(types, str) else types))
        assert isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed), key


def json_of(args: list[str], input: str | None = None) -> list[dict]:
    result = runner.invoke(app, [*args, "--json"], input=input)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_json_outputs_are_as_documented(tmp_path, tiny_model):
    source = tmp_path / "questions.csv"
    source.write_text("id,subject,body,category\nA1,visa renewal,how long does it take?,visas\n"
                      "A2,cheap cars,where to buy a used car?,cars\n")
    index = ["--index", str(tmp_path / "index")]
    (indexed,) = json_of(["index", str(source), "--model", str(tiny_model), *index])
    assert_documented(indexed, "index --json")
    lines = json_of(["search", *index, "-k", "2"], input="visa renewal\ncars\n")
    assert len(lines) == 2 and lines[0]["results"][0]["id"] == "A1"
    for line in lines:
        assert_documented(line, "search --json line")
        for hit in line["results"]:
            assert_documented(hit, "search hit")
    collapsed = json_of(["search", "visa renewal", *index, "--collapse", "--min-match", "0.1"])[0]
    assert_documented(collapsed, "search --json line")
    (liked,) = json_of(["search", "--like", "A1", *index])
    assert_documented(liked, "search --json line")
    assert_documented(json_of(["show", "A1", *index])[0], "show --json")
    assert_documented(json_of(["check", *index])[0], "check --json")
    (similar,) = json_of(["similar", "a visa", "a car", "--model", str(tiny_model), "--sts-scale"])
    assert_documented(similar, "similar --json")


def test_cqa_json_outputs_are_as_documented(data_dir, tmp_path, tiny_model):
    cqa = data_dir / "semeval-cqa"
    (evaluated,) = json_of(["eval", "cqa", "--split", "dev2016", "--system", "ir",
                            "--data-dir", str(data_dir)])
    assert_documented(evaluated, "eval cqa --json line")
    rerank = ["rerank", str(cqa / "SemEval2016-Task3-CQA-QL-dev.xml"), "--model", str(tiny_model),
              "--out", str(tmp_path / "run.pred")]
    assert_documented(json_of(rerank)[0], "rerank --json")
    assert_documented(json_of([*rerank, "--gold", str(gold_path(data_dir))])[0], "rerank --json")
