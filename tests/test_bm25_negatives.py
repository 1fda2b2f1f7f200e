"""BM25-mined hard negatives: what is mined, how it is written and read back."""

import pytest

from askalike.core.cqa_questions import OriginalQuestion, RelatedQuestion
from askalike.core.data_dir import DataError
from askalike.core.datasets import read_hard_negatives
from askalike.train.bm25_negatives import main, mine_negatives


def _related(id_: str, subject: str, relevant: bool | None) -> RelatedQuestion:
    return RelatedQuestion(id=id_, subject=subject, body="", relevant=relevant)


ORIGINALS = (
    OriginalQuestion("Q1", "where to renew a family visa in Doha", "", (
        _related("Q1_R1", "family visa renewal office", True),
        _related("Q1_R2", "family visa for my wife", False))),
    OriginalQuestion("Q2", "best\tbeach in Doha", "", (
        _related("Q2_R1", "visa renewal fees\nin Doha", None),
        _related("Q2_R2", "a quiet beach", False))),
    OriginalQuestion("Q3", "cheap car rental", "", (_related("Q3_R1", "renting a car", False),)),
)


def test_each_labelled_original_gets_its_best_hits_among_the_other_questions():
    negatives = mine_negatives(ORIGINALS, 2)
    # Q2 has no related question labelled relevant and Q3 none at all: nothing is mined for them
    assert list(negatives) == ["Q1"]
    # Q1's own related questions are never its negatives; hits come best first, on one line
    assert negatives["Q1"] == ["visa renewal fees in Doha", "best beach in Doha"]


def test_mined_negatives_are_written_as_a_tsv_that_training_reads(tmp_path, monkeypatch, data_dir):
    out = tmp_path / "negatives.tsv"
    monkeypatch.setattr("sys.argv", ["bm25_negatives", "--out", str(out), "--per-question", "3",
                                     "--data-dir", str(data_dir)])
    main()
    negatives = read_hard_negatives(out)
    assert len(negatives) > 200 and all(1 <= len(texts) <= 3 for texts in negatives.values())


def test_a_malformed_negatives_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "negatives.tsv"
    path.write_text("original_id\tnegative\nQ1\tfine\nQ2\n")
    with pytest.raises(DataError, match=r"negatives\.tsv:3: expected 2 non-empty fields"):
        read_hard_negatives(path)
    path.write_text("id\ttext\n")
    with pytest.raises(DataError, match="expected header"):
        read_hard_negatives(path)
