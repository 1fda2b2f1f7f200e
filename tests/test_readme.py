"""The README's quickstart runs as written, from a directory other than the checkout, and prints
what the README shows (timings aside)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
from helpers import ROOT

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def run_shell(lines: str, cwd) -> str:
    """``lines`` in bash with ``askalike`` as this checkout's CLI; their stdout."""
    command = f"{shlex.quote(sys.executable)} -m askalike.app"
    askalike = f'askalike() {{ {command} "$@"; }}'
    env = {k: v for k, v in os.environ.items() if k != "ASKALIKE_INDEX"} | {"COLUMNS": "80"}
    done = subprocess.run(["bash", "-ec", f"{askalike}\n{lines}"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def masked(text: str) -> str:
    """Timings and rates, which differ from run to run, as #; no trailing blanks."""
    text = re.sub(r"in [\d.]+ s \([\d,]+ a second\)", "in # s (# a second)", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


@pytest.mark.slow
def test_quickstart_runs_as_written_elsewhere_and_prints_what_the_readme_shows(tmp_path):
    quickstart = section("Quickstart: your own questions")
    questions, export = blocks(quickstart, "csv")
    (tmp_path / "questions.csv").write_text(questions)
    (tmp_path / "export-week1.csv").write_text(export)
    (tmp_path / "export-week2.csv").write_text(export.replace("Monday", "Tuesday"))
    first, second = (block for block in blocks(quickstart, "sh"))
    first = "\n".join(line for line in first.splitlines() if not line.startswith("askalike tui"))
    printed = run_shell(first, tmp_path)
    table = blocks(quickstart[quickstart.index("The search prints"):], "")[0]
    summary = blocks(quickstart[quickstart.index("### Any CSV"):], "")[0]
    assert masked(table) in masked(printed) and masked(summary) in masked(printed)
    helpdesk = run_shell(second, tmp_path)
    assert "Printer offline" in helpdesk and "03/02/2025" in helpdesk
    card = helpdesk[helpdesk.index("“card payment”"):]
    assert "C00003" in card and "C00001" not in card
    assert "read 3 questions from export-week2.csv (in place of export-week1.csv): 1 embedded again" \
        in " ".join(helpdesk.split())


def test_the_lexical_example_names_words_of_the_cqa_questions(data_dir):
    guide = (ROOT / "docs" / "search.md").read_text()
    query = re.search(r'askalike search "([^"]+)" --mode lexical', guide)[1]
    subjects = (data_dir / "semeval-cqa" / "SemEval2016-Task3-CQA-QL-train-part1-subtaskB-reconstructed.xml")
    assert query.lower() in subjects.read_text().lower()
