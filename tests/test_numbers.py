"""Numbers as people write them: one strict reader (``core.numbers``) for files, options and the
HTTP API's parameters; Python's own syntax (``1_000``, ``nan``, ``inf``) is not a number format."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, invoke

from askalike.core.numbers import ShareError, decimal, integer, share


@pytest.mark.parametrize(("text", "value"), [("0.5", 0.5), (" -3 ", -3.0), ("1e-5", 1e-5), (".5", 0.5),
                                             ("+2.", 2.0)])
def test_decimal_reads_decimal_numbers(text, value):
    assert decimal(text) == value


@pytest.mark.parametrize("text", ["1_000", "nan", "inf", "-Infinity", "0x10", "1e400", "١٢", "", "5 0",
                                  "1,5"])
def test_decimal_refuses_what_is_not_written_in_decimal_digits(text):
    assert decimal(text) is None


@pytest.mark.parametrize(("text", "value"), [("12", 12), ("-3", -3), (" 7 ", 7)])
def test_integer_reads_whole_numbers(text, value):
    assert integer(text) == value


@pytest.mark.parametrize("text", ["1_0", "5.0", "1e2", "true", "٣"])
def test_integer_refuses_the_rest(text):
    assert integer(text) is None


@pytest.mark.parametrize(("text", "fraction"), [("70%", 0.7), ("70 %", 0.7), ("0.7", 0.7), ("1", 1.0),
                                                ("1.0", 1.0), ("100%", 1.0), ("1%", 0.01), ("0", 0.0),
                                                ("0.99", 0.99), (".5", 0.5)])
def test_a_share_is_a_percentage_with_percent_else_a_fraction(text, fraction):
    assert share(text) == pytest.approx(fraction)


@pytest.mark.reliability("a minimum match of {text} (`--min-match`, the API's `min-match`)",
                         "{said}")
@pytest.mark.parametrize(("text", "said"), [
    ("50", "refused: a number without % is a fraction from 0 to 1; 50% says fifty percent"),
    ("150%", "refused: at most 100%"),
    ("-5%", "refused: from 0"),
    ("1_0%", "refused: not a number"),
    ("nan", "refused: not a number"),
    ("lots", "refused: not a number"),
])
def test_a_share_that_is_ambiguous_or_out_of_range_is_refused(text, said):
    with pytest.raises(ShareError, match=r"^--min-match "):
        share(text)


@pytest.mark.reliability("`search --min-match 1.0` and `--min-match 1` (a fraction that means 100%; "
                         "0.99 is 99%)", "read as 100%: no hit below it is shown (it was read as 1%)")
def test_min_match_one_is_a_hundred_percent(tmp_path, tiny_model):
    from helpers import collection, index, write_jsonl

    source = write_jsonl(tmp_path / "q.jsonl", collection(20))
    index(source, tmp_path / "index", tiny_model)
    for text in ("1.0", "1"):
        result = invoke("search", "visa renewal", "--index", tmp_path / "index", "--mode", "dense",
                        "--min-match", text)
        assert result.exit_code == 0, result.output
        assert "no hit reaches --min-match 100%" in " ".join(result.stdout.split())
    refused = invoke("duplicates", "--index", tmp_path / "index", "--min-match", "50")
    assert_one_line_error(refused, r"--min-match '50': a number without % is a fraction from 0 to 1; "
                                   r"for 50 percent write 50%")


@pytest.mark.reliability("a number written in Python's syntax but no number format: `1_000` and "
                         "`nan` as a score or rank of `score`'s run file, and `-k 1_0`",
                         "exit 2 naming the file and line (or the option); never read as 1000 or 10")
def test_python_number_syntax_is_not_a_number(tmp_path):
    gold = tmp_path / "gold.relevancy"
    gold.write_text("Q1\tQ1_R1\t1\t1.0\ttrue\nQ1\tQ1_R2\t2\t0.5\tfalse\n")
    for line, pattern in (("Q1\tQ1_R1\t1\t1_000\ttrue\n", r"run\.pred:1: score is '1_000': not a number"),
                          ("Q1\tQ1_R1\t1_0\t0.5\ttrue\n", r"run\.pred:1: rank is not an integer: '1_0'")):
        run = tmp_path / "run.pred"
        run.write_text(line)
        assert_one_line_error(invoke("score", gold, run), pattern)
    result = invoke("search", "visa", "-k", "1_0", "--index", tmp_path / "none")
    assert result.exit_code == 2 and "'1_0' is not a number written in decimal digits" in result.output
