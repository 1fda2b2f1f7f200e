"""Search, filters, more-like-this, batch reranking and the search/rerank/similar commands."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from helpers import QUIET, ROOT, collection, make_tiny_model, runner, search_hits, write_jsonl

from askalike.app.cli import app
from askalike.app.hits import result_row, similarity_bar
from askalike.core.cqa_questions import read_cqa_questions
from askalike.core.loader import load_encoder
from askalike.indexer.build import index_sources
from askalike.retrieval.duplicates import first_near_duplicate
from askalike.retrieval.judgement import model_judge
from askalike.retrieval.reranker import Reranker
from askalike.retrieval.searcher import Searcher, SearchError, SearchFilters, SearchResult


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model):
    directory = tmp_path_factory.mktemp("search")
    records = collection(64)
    for i, record in enumerate(records):
        record["date"] = f"201{i % 8}-06-01"
    write_jsonl(directory / "forum.jsonl", records[:48])
    write_jsonl(directory / "faq.jsonl", records[48:])
    index_sources(directory / "index", [directory / "forum.jsonl", directory / "faq.jsonl"],
                  str(tiny_model), options=QUIET)
    return directory / "index"


def text_of(record: dict) -> str:
    return f"{record['subject']} {record['body']}"


def test_own_text_comes_first_with_a_full_match(index_dir):
    records = collection(64)
    with Searcher(index_dir) as searcher:
        for i in (0, 21, 50):
            (first, *rest) = searcher.search(text_of(records[i]), k=5)
            assert first.external_id == f"q{i}" and first.rank == 1
            assert first.match == pytest.approx(1.0, abs=1e-4)
            assert all(r.cosine <= first.cosine for r in rest) and len(rest) == 4


def test_search_many_matches_single_searches(index_dir):
    queries = ["cheap car in doha", "a good doctor", "visa"]
    with Searcher(index_dir) as searcher:
        batched = searcher.search_many(queries, k=4)
        single = [searcher.search(q, k=4) for q in queries]
    assert [[r.row_id for r in rs] for rs in batched] == [[r.row_id for r in rs] for rs in single]


def test_filters_exclude_what_they_should(index_dir):
    with Searcher(index_dir) as searcher:
        by_category = searcher.search("visa", k=20, filters=SearchFilters(categories=("car", "pizza")))
        by_source = searcher.search("visa", k=50, filters=SearchFilters(sources=("faq.jsonl",)))
        by_date = searcher.search("visa", k=50, filters=SearchFilters(date_from="2014-01-01",
                                                                       date_to="2015-12-31"))
        hostile = searcher.search("visa", filters=SearchFilters(categories=("x' OR '1'='1",)))
    assert by_category and {r.metadata["category"] for r in by_category} == {"car", "pizza"}
    assert len(by_category) == 16  # every car and pizza question, and nothing else
    assert len(by_source) == 16 and all(r.source.endswith("faq.jsonl") for r in by_source)
    assert len(by_date) == 16 and all("2014" <= r.metadata["date"][:4] <= "2015" for r in by_date)
    assert hostile == []  # a bound parameter, not SQL


def test_filters_read_as_people_mean_them(index_dir, monkeypatch):
    forum = index_dir.parent / "forum.jsonl"
    monkeypatch.chdir(index_dir.parent)
    with Searcher(index_dir) as searcher:
        upper = searcher.search("visa", k=50, filters=SearchFilters(categories=("CAR",)))
        relative = searcher.search("visa", k=64, filters=SearchFilters(sources=("./forum.jsonl",)))
        one_day = searcher.search("visa", k=64, filters=SearchFilters(date_from="2013-06-01",
                                                                       date_to="2013-06-01"))
    assert upper and {r.metadata["category"] for r in upper} == {"car"}  # any case
    assert len(relative) == 48 and {r.source for r in relative} == {str(forum.resolve())}
    assert len(one_day) == 8 and {r.metadata["date"] for r in one_day} == {"2013-06-01"}  # inclusive


@pytest.mark.parametrize("bound", ["date_from", "date_to"])
def test_an_invalid_date_is_refused(bound):
    with pytest.raises(SearchError, match=r"'2024-13-45' is not a date \(month must be in 1\.\.12\)"):
        SearchFilters(**{bound: "2024-13-45"})


def test_until_a_day_includes_that_day_with_times(tmp_path, tiny_model):
    records = [{"id": f"t{hour}", "subject": f"question at {hour}", "body": "visa",
                "date": f"2024-03-15 {hour:02d}:30:00"} for hour in (0, 9, 23)]
    records.append({"id": "next", "subject": "next day", "body": "visa", "date": "2024-03-16 00:00:00"})
    index_sources(tmp_path / "index", [write_jsonl(tmp_path / "q.jsonl", records)], str(tiny_model),
                  options=QUIET)
    result = runner.invoke(app, ["search", "visa", "--index", str(tmp_path / "index"), "--until",
                                 "2024-03-15", "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(hit["id"] for hit in search_hits(result.stdout)) == ["t0", "t23", "t9"]
    refused = runner.invoke(app, ["search", "visa", "--index", str(tmp_path / "index"), "--since", "March"])
    assert refused.exit_code == 2 and "'March' is not a date" in refused.stderr


def test_more_like_leaves_the_question_out(index_dir):
    with Searcher(index_dir) as searcher:
        target = searcher.search(text_of(collection(64)[9]), k=1)[0]
        similar = searcher.more_like(target.row_id, k=5)
        assert len(similar) == 5 and target.row_id not in {r.row_id for r in similar}
        with pytest.raises(SearchError, match="not in the index"):
            searcher.more_like(10_000)


def test_empty_index_and_wrong_model_say_what_to_do(tmp_path, tiny_model, index_dir):
    (tmp_path / "empty.txt").write_text("\n")
    index_sources(tmp_path / "index", [tmp_path / "empty.txt"], str(tiny_model), options=QUIET)
    with Searcher(tmp_path / "index") as searcher, pytest.raises(SearchError, match=r"empty.*askalike index"):
        searcher.search("anything")
    other = make_tiny_model(tmp_path / "other", seed=3)
    with pytest.raises(SearchError, match="different encoder"):
        Searcher(index_dir, model=str(other))


def test_reranker_orders_by_cosine(tiny_model):
    reranker = Reranker(load_encoder(tiny_model))
    ranked = reranker.rerank("how do i renew my visa", ["best pizza", "how do i renew my visa", "cars"])
    assert ranked[0] == (1, pytest.approx(1.0, abs=1e-5))
    assert [score for _, score in ranked] == sorted((score for _, score in ranked), reverse=True)


def test_search_command_table_json_and_stdin(index_dir):
    text = text_of(collection(64)[5])
    table = runner.invoke(app, ["search", text, "--index", str(index_dir), "-k", "3"])
    assert table.exit_code == 0 and "“" in table.stdout and "100%" in table.stdout
    lines = runner.invoke(app, ["search", "--index", str(index_dir), "-k", "2", "--json"],
                          input=f"{text}\n\nvisa\n").stdout.splitlines()
    assert [json.loads(line)["query"] for line in lines] == [text, "visa"]  # one line a query
    results = search_hits("\n".join(lines))
    assert [r["query"] for r in results] == [text, text, "visa", "visa"]
    assert results[0]["id"] == "q5" and results[0]["rank"] == 1 and results[0]["match"] == 1.0
    assert set(results[0]) == {"query", "mode", "rank", "id", "source", "subject", "excerpt", "match",
                               "cosine", "score", "duplicate_of", "alike", "metadata"}


def test_match_is_the_cosine_clipped_at_zero():
    result = SearchResult(1, 7, "a", "forum.jsonl", "s", "b", {}, cosine=-0.2, score=-0.2)
    assert result.match == 0.0
    assert SearchResult(1, 7, "a", "forum.jsonl", "s", "b", {}, cosine=0.83, score=0.83).match == 0.83
    assert similarity_bar(0.0, 10) == "░" * 10 and similarity_bar(0.5, 10) == "█" * 5 + "░" * 5
    marked = replace(result, match=0.83, duplicate_of=1)
    assert result_row(marked, {"forum.jsonl": "forum.jsonl"}) == ("1", "a", " 83% ████████░░", "≈ #1  s",
                                                              "forum.jsonl")


def test_near_duplicates_point_to_the_best_ranked_copy():
    vectors = np.array([[1, 0, 0], [0, 1, 0], [0.99, 0.141, 0], [0.98, 0.199, 0]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert first_near_duplicate(vectors, 0.95) == [None, None, 0, 0]
    assert first_near_duplicate(vectors, 0.9999) == [None, None, None, None]
    assert first_near_duplicate(vectors[:1], 0.95) == [None]


def test_search_marks_a_question_asked_twice(tmp_path, steep_model):
    records = collection(8)
    twice = {**records[3], "id": "again", "body": records[3]["body"] + " "}
    write_jsonl(tmp_path / "forum.jsonl", [*records, twice])
    index_sources(tmp_path / "index", [tmp_path / "forum.jsonl"], str(steep_model), options=QUIET)
    first, second, third = search_hits(runner.invoke(app, ["search", text_of(records[3]), "--index",
                                                           str(tmp_path / "index"), "-k", "3",
                                                           "--json"]).stdout)
    assert {first["id"], second["id"]} == {"q3", "again"}
    assert (first["duplicate_of"], second["duplicate_of"], third["duplicate_of"]) == (None, 1, None)
    table = runner.invoke(app, ["search", text_of(records[3]), "--index", str(tmp_path / "index"), "-k", "3"])
    assert "≈ #1" in table.stdout


def test_search_command_on_missing_index_is_one_line(tmp_path):
    result = runner.invoke(app, ["search", "x", "--index", str(tmp_path / "none")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "askalike index" in result.stderr


def test_rerank_round_trips_through_the_scorer(data_dir, tmp_path, tiny_model):
    split = data_dir / "semeval-cqa"
    gold = split / "SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy"
    pred, trec = tmp_path / "run.pred", tmp_path / "run.trec"
    rerank = runner.invoke(app, ["rerank", str(split / "SemEval2016-Task3-CQA-QL-test.xml"),
                                 "--model", str(tiny_model), "--out", str(pred), "--trec", str(trec),
                                 "--gold", str(gold), "--json"])
    assert rerank.exit_code == 0, rerank.output
    assert not {"precision", "recall", "f1", "accuracy"} & json.loads(rerank.stdout).keys()
    scored = runner.invoke(app, ["score", str(gold), str(pred), "--json"])
    evaluated = runner.invoke(app, ["eval", "cqa", "--split", "test2016", "--model", str(tiny_model),
                                    "--json", "--data-dir", str(data_dir)])
    maps = {json.loads(r.stdout)["map"] for r in (rerank, scored, evaluated)}
    assert len(maps) == 1
    trec_lines = trec.read_text().splitlines()
    assert len(trec_lines) == 700 and trec_lines[0].split()[1] == "Q0"


def test_reranker_reports_progress_and_scores_every_candidate(data_dir, tiny_model):
    questions = list(read_cqa_questions(data_dir / "semeval-cqa" / "SemEval2016-Task3-CQA-QL-test.xml"))
    steps: list[int] = []
    scores = Reranker(load_encoder(tiny_model)).scores(questions, on_progress=steps.append)
    assert sum(steps) == len(questions) == 70 and len(steps) == 7
    assert [len(s) for s in scores] == [len(q.related) for q in questions]


def test_similar_command(tiny_model):
    result = runner.invoke(app, ["similar", "visa renewal", "visa renewal", "--model", str(tiny_model),
                                 "--json"])
    figures = json.loads(result.stdout)
    assert figures == {"match": 1.0, "same_question": True, "cosine": 1.0}  # uncalibrated: the cosine
    scaled = runner.invoke(app, ["similar", "visa renewal", "visa renewal", "--model", str(tiny_model),
                                 "--sts-scale", "--json"])
    assert json.loads(scaled.stdout) == {**figures, "similarity": 5.0}


@pytest.mark.parametrize("model", ["models/accurate", "models/fast"])
def test_similar_of_a_text_with_itself_is_exactly_5_with_shipped_models(model):
    text = "Where can I renew my residence permit in Doha before it expires?"
    result = runner.invoke(app, ["similar", text, text, "--model", str(ROOT / model), "--json"])
    assert result.exit_code == 0, result.output
    judged = round(float(model_judge(ROOT / model).probability(1.0)), 4)  # calibrated: below 100%
    assert json.loads(result.stdout) == {"match": judged, "same_question": True, "cosine": 1.0}


@pytest.mark.parametrize("pair", [("", "visa renewal"), ("visa renewal", "   ")])
def test_similar_refuses_an_empty_text(tiny_model, pair):
    result = runner.invoke(app, ["similar", *pair, "--model", str(tiny_model)])
    assert result.exit_code == 2
    assert "is empty" in result.stderr
