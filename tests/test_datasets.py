"""Readers against the real files (counts from each SOURCES.md) and against malformed input."""

import gzip
from collections import Counter
from pathlib import Path

import pytest

from askalike.core.cqa_questions import (
    CQA_SPLITS,
    read_cqa_jsonl,
    read_cqa_threads,
    read_cqa_xml,
    read_split_questions,
)
from askalike.core.data_dir import resolve_data_dir
from askalike.core.datasets import (
    DataError,
    read_conversations,
    read_nli,
    read_sick,
    read_sts_benchmark,
    read_sts_year,
    read_word_vectors,
)
from askalike.retrieval.cqa_runs import load_cqa_split, read_cqa_run
from askalike.train.corpus import labelled_cqa_pairs

# ---------------------------------------------------------------- real files


@pytest.mark.parametrize(("name", "rows", "genres"), [
    ("sts-train.csv", 5749, {"main-news": 3299, "main-captions": 2000, "main-forums": 450}),
    ("sts-dev.csv", 1500, {"main-captions": 625, "main-news": 500, "main-forums": 375}),
    ("sts-test.csv", 1379, {"main-captions": 625, "main-news": 500, "main-forums": 254}),
])
def test_sts_benchmark_counts_and_genres(data_dir, name, rows, genres):
    pairs = list(read_sts_benchmark(data_dir / "stsbenchmark" / name))
    assert len(pairs) == rows
    assert Counter(pair.genre for pair in pairs) == genres
    assert all(0.0 <= pair.score <= 5.0 for pair in pairs)


def test_sts_benchmark_keeps_quotes_and_drops_extra_fields(data_dir):
    pairs = list(read_sts_benchmark(data_dir / "stsbenchmark" / "sts-test.csv"))
    assert any('"' in pair.sentence1 + pair.sentence2 for pair in pairs)
    assert not any("\t" in pair.sentence2 for pair in pairs)


def test_sick_full_release_splits(data_dir):
    pairs = list(read_sick(data_dir / "sick" / "SICK.txt"))
    assert Counter(pair.split for pair in pairs) == {"TRAIN": 4439, "TRIAL": 495, "TEST": 4906}
    assert not any(pair.split.endswith("\r") for pair in pairs)
    assert all(1.0 <= pair.relatedness <= 5.0 for pair in pairs)


@pytest.mark.parametrize(("name", "split", "rows"), [
    ("SICK_train.txt", "train", 4500),
    ("SICK_trial.txt", "trial", 500),
    ("SICK_test_annotated.txt", "test", 4927),
])
def test_sick_semeval_files(data_dir, name, split, rows):
    pairs = list(read_sick(data_dir / "sick" / name, split))
    assert len(pairs) == rows
    assert {pair.entailment for pair in pairs} == {"ENTAILMENT", "NEUTRAL", "CONTRADICTION"}
    assert {pair.split for pair in pairs} == {split.upper()}


@pytest.mark.parametrize(("year", "scored"), [
    ("STS12-en-test", 3108), ("STS13-en-test", 1500), ("STS14-en-test", 3750),
    ("STS15-en-test", 3000), ("STS16-en-test", 1186),
])
def test_sts_years_skip_unscored_pairs(data_dir, year, scored):
    assert sum(1 for _ in read_sts_year(data_dir / "sts12-16" / year)) == scored


@pytest.mark.parametrize(("path", "counts"), [
    ("snli/snli_1.0_dev.tsv.gz", (3329, 3235, 3278)),
    ("snli/snli_1.0_test.tsv.gz", (3368, 3219, 3237)),
    ("nli/mnli_dev_matched.tsv.gz", (3479, 3123, 3213)),
    ("nli/cad_snli_train.tsv.gz", (2770, 2778, 2782)),
    ("nli/mpe_train.tsv.gz", (2584, 2092, 3324)),
    ("nli/breaking_nli_test.tsv.gz", (982, 47, 7164)),
])
def test_nli_label_counts(data_dir, path, counts):
    labels = Counter(pair.label for pair in read_nli(data_dir / path))
    assert (labels["entailment"], labels["neutral"], labels["contradiction"]) == counts


@pytest.mark.parametrize(("name", "pairs"), [("twitter_small", 7065), ("ubuntu_irc", 37966)])
def test_conversation_counts(data_dir, name, pairs):
    rows = list(read_conversations(data_dir / "conversations" / f"{name}.tsv.gz"))
    assert len(rows) == pairs
    assert all(row.input and row.response for row in rows)


def test_word_vectors(data_dir):
    vectors = read_word_vectors(data_dir / "vectors" / "glove.6B.50d.top100k.txt.gz")
    word, vector = next(vectors)
    assert word == "the"
    assert vector.shape == (50,)
    assert vector[0] == pytest.approx(0.418)


@pytest.mark.parametrize(("split", "questions", "related", "relevant", "short"), [
    ("train", 267, 2669, 1083, 1),  # train part 1 has 1,999 relQs for 200 orgQs
    ("dev2016", 50, 500, 214, 0),
    ("test2016", 70, 700, 233, 0),
    ("test2017", 88, 880, 163, 0),
])
def test_cqa_splits(data_dir, split, questions, related, relevant, short):
    loaded = load_cqa_split(data_dir, split)
    assert len(loaded.questions) == questions
    assert sum(len(q.related) for q in loaded.questions) == related == len(loaded.gold)
    assert sum(line.label for line in loaded.gold) == relevant
    assert sum(len(q.related) != 10 for q in loaded.questions) == short


def test_cqa_official_xml_keeps_comments_and_metadata(data_dir):
    questions = list(read_cqa_xml(data_dir / "semeval-cqa" / "SemEval2016-Task3-CQA-QL-test.xml"))
    first = questions[0]
    assert first.id == "Q318"
    relq = next(r for r in first.related if r.id == "Q318_R4")
    assert relq.relevance == "PerfectMatch" and relq.relevant is True
    assert relq.category == "Opportunities"
    assert len(relq.comments) == 10
    assert relq.comments[0].id == "Q318_R4_C1"
    labels = Counter(r.relevance for q in questions for r in q.related)
    assert labels == {"PerfectMatch": 81, "Relevant": 152, "Irrelevant": 467}


def test_cqa_reconstructed_jsonl_matches_xml(data_dir):
    folder = data_dir / "semeval-cqa"
    from_jsonl = list(read_cqa_jsonl(
        folder / "SemEval2016-Task3-CQA-QL-train-part1-subtaskB-reconstructed.jsonl"))
    from_xml = list(read_cqa_xml(
        folder / "SemEval2016-Task3-CQA-QL-train-part1-subtaskB-reconstructed.xml"))
    assert len(from_jsonl) == 200
    assert sum(len(q.related) for q in from_jsonl) == 1999
    assert [(q.id, [r.id for r in q.related]) for q in from_jsonl] == \
        [(q.id, [r.id for r in q.related]) for q in from_xml]


def test_cqa_2017_jsonl_has_binary_gold_only(data_dir):
    questions = list(read_cqa_jsonl(
        data_dir / "semeval-cqa" / "SemEval2017-task3-English-test-subtaskB-reconstructed.jsonl"))
    related = [r for q in questions for r in q.related]
    assert len(related) == 880
    assert sum(r.relevant for r in related) == 163
    assert all(r.relevance is None for r in related)


def test_cqa_2015_threads(data_dir):
    threads = list(read_cqa_threads(
        data_dir / "semeval-cqa" / "extra-2015-reformatted"
        / "SemEval2015-Task3-CQA-QL-dev-reformatted-excluding-2016-questions-cleansed.xml"))
    assert len(threads) == 291
    assert sum(len(t.comments) for t in threads) == 1529


def test_relevancy_file(data_dir):
    gold = read_cqa_run(data_dir / "semeval-cqa" / "SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy")
    assert len(gold) == 500
    assert sum(line.label for line in gold) == 214


def test_data_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ASKALIKE_DATA", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    assert resolve_data_dir(tmp_path / "..") == tmp_path / ".."
    with pytest.raises(DataError, match="data directory not found"):
        resolve_data_dir(tmp_path / "missing")


def test_every_split_is_known():
    assert set(CQA_SPLITS) == {"train", "dev2016", "test2016", "test2017"}


# ---------------------------------------------------------------- malformed input

STSB_ROW = "main-news\tfile\t2012\t0001\t{score}\tA man plays.\tA man is playing.\n"


def _error(reader, *args) -> DataError:
    with pytest.raises(DataError) as caught:
        list(reader(*args))
    return caught.value


def test_missing_file_names_the_file(tmp_path):
    err = _error(read_sts_benchmark, tmp_path / "nope.csv")
    assert err.path == tmp_path / "nope.csv" and "not found" in str(err)


def test_sts_row_with_too_few_fields(tmp_path):
    path = tmp_path / "sts.csv"
    path.write_text(STSB_ROW.format(score="1.0") + "main-news\tfile\t2012\t0002\t2.0\tonly one\n")
    err = _error(read_sts_benchmark, path)
    assert err.line == 2 and "at least 7" in err.message


def test_sts_bad_score(tmp_path):
    path = tmp_path / "sts.csv"
    path.write_text(STSB_ROW.format(score="high"))
    err = _error(read_sts_benchmark, path)
    assert err.line == 1 and "score" in err.message


def test_invalid_utf8_reported_at_its_line(tmp_path):
    path = tmp_path / "sts.csv"
    path.write_bytes(STSB_ROW.format(score="1.0").encode() * 3 + b"main-news\tf\t2012\t4\t1.0\t\xff\xfe\tx\n")
    err = _error(read_sts_benchmark, path)
    assert err.line == 4 and "UTF-8" in err.message


def test_truncated_gzip(tmp_path):
    path = tmp_path / "pairs.tsv.gz"
    whole = gzip.compress(("input\tresponse\n" + "hello there\tgeneral kenobi\n" * 2000).encode())
    path.write_bytes(whole[: len(whole) // 2])
    err = _error(read_conversations, path)
    assert "cannot read" in err.message and err.line is not None


def test_conversation_row_with_one_field(tmp_path):
    path = tmp_path / "pairs.tsv.gz"
    path.write_bytes(gzip.compress(b"input\tresponse\nhi\tho\njust one\n"))
    err = _error(read_conversations, path)
    assert err.line == 3


def test_nli_wrong_header_and_unknown_label(tmp_path):
    path = tmp_path / "nli.tsv.gz"
    path.write_bytes(gzip.compress(b"label\ts1\ts2\n"))
    assert "header" in _error(read_nli, path).message
    path.write_bytes(gzip.compress(b"gold_label\tsentence1\tsentence2\nmaybe\ta\tb\n"))
    err = _error(read_nli, path)
    assert err.line == 2 and "maybe" in err.message


def test_sick_row_too_short(tmp_path):
    path = tmp_path / "SICK_x.txt"
    path.write_bytes(b"pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
                     b"1\ta\tb\t4.5\tNEUTRAL\r\n2\ta\tb\r\n")
    err = _error(read_sick, path, "train")
    assert err.line == 3


CQA_XML = """<?xml version="1.0" encoding="utf-8"?>
<xml version="1.0">
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>s</OrgQSubject><OrgQBody>b</OrgQBody>
<Thread THREAD_SEQUENCE="Q1_R1"><RelQuestion RELQ_ID="Q1_R1" RELQ_RANKING_ORDER="1"
 RELQ_RELEVANCE2ORGQ="Relevant"><RelQSubject>rs</RelQSubject><RelQBody>rb</RelQBody></RelQuestion>
</Thread></OrgQuestion>
</xml>
"""


def test_cqa_xml_small_file_and_truncation(tmp_path):
    path = tmp_path / "cqa.xml"
    path.write_text(CQA_XML)
    [question] = list(read_cqa_xml(path))
    assert question.related[0].relevant is True
    path.write_text(CQA_XML[: CQA_XML.index("</Thread>")])
    err = _error(read_cqa_xml, path)
    assert "malformed XML" in err.message and err.line is not None


def test_cqa_xml_entity_bomb_refused(tmp_path):
    path = tmp_path / "bomb.xml"
    path.write_text('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
                    "<xml><OrgQuestion ORGQ_ID='Q1'>&b;</OrgQuestion></xml>")
    assert "unsafe XML" in _error(read_cqa_xml, path).message


def test_cqa_jsonl_errors(tmp_path):
    path = tmp_path / "cqa.jsonl"
    path.write_text('{"orgq_id": "Q1"}\n')
    assert "missing field" in _error(read_cqa_jsonl, path).message
    path.write_text('[1, 2]\n')
    assert "JSON object" in _error(read_cqa_jsonl, path).message
    path.write_text('{"orgq_id": \n')
    err = _error(read_cqa_jsonl, path)
    assert err.line == 1 and "invalid JSON" in err.message


@pytest.mark.parametrize(("line", "message"), [
    ("Q1\tQ1_R1\t1\t0.5\n", "expected 5 fields"),
    ("Q1\tQ1_R1\t1\t0.5\tmaybe\n", "label"),
    ("Q1\tQ1_R1\tfirst\t0.5\ttrue\n", "rank"),
    ("Q1\tQ1_R1\t1\tnan?\ttrue\n", "score"),
])
def test_run_file_errors(tmp_path, line, message):
    path = tmp_path / "run.pred"
    path.write_text("Q1\tQ1_R2\t2\t0.1\tfalse\n" + line)
    err = _error(read_cqa_run, path)
    assert err.line == 2 and message in err.message


def test_run_file_accepts_spaces(tmp_path):
    path = tmp_path / "run.pred"
    path.write_text("Q1 Q1_R1 0 1.5 true\n")
    assert read_cqa_run(path)[0].score == 1.5


def test_split_gold_mismatch_is_reported(tmp_path: Path):
    folder = tmp_path / "semeval-cqa"
    folder.mkdir()
    files = CQA_SPLITS["dev2016"]
    (tmp_path / files.questions[0]).write_text(CQA_XML)
    (tmp_path / files.gold).write_text("Q1\tQ1_R9\t9\t0.11\ttrue\n")
    with pytest.raises(DataError, match="Q1_R9 is not in the dev2016 questions"):
        load_cqa_split(tmp_path, "dev2016")


def test_labelled_cqa_pairs_are_the_train_splits_relevant_pairs(data_dir):
    labelled = labelled_cqa_pairs(data_dir)
    assert len(labelled) == 1083  # PerfectMatch + Relevant in train part 1 and part 2
    held_out = {q.text for name in ("dev2016", "test2016", "test2017")
                for q in load_cqa_split(data_dir, name).questions}
    assert not {original for (original, _), _ in labelled} & held_out
    # the hard negatives: the same original's related questions labelled Irrelevant
    originals = {q.text: q for q in read_split_questions(data_dir, "train")}
    for (original, relevant), irrelevant in labelled[:50]:
        labels = {related.text: related.relevant for related in originals[original].related}
        assert labels[relevant] is True and all(labels[text] is False for text in irrelevant)
    assert sum(bool(irrelevant) for _, irrelevant in labelled) > 900
