"""Collects the outcome of every test marked ``reliability`` and, with
``--reliability-report PATH``, writes the table of docs/reliability.md from them.

Mark a test with ``@pytest.mark.reliability(what, behaviour)``: ``what`` is the fault or bad
input tried (it may name the test's parameters, e.g. ``{name}``), ``behaviour`` what askalike
must do. The test itself asserts that nothing stored was lost; a row says so only if it passed.
"""

from __future__ import annotations

import platform
import subprocess
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

_outcomes: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reliability-report", metavar="PATH",
                     help="write the reliability table (markdown) from the marked tests' outcomes")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reliability(what, behaviour): a fault or bad input, "
                                       "reported in docs/reliability.md")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    marker = item.get_closest_marker("reliability")
    if marker is None or (report.when != "call" and report.passed):
        return
    params = getattr(getattr(item, "callspec", None), "params", {})
    what, behaviour = (text.format(**params) for text in marker.args)
    test = f"`pytest {item.nodeid.split('[')[0]}`"
    _outcomes[(what, behaviour)].append((test, report.outcome))


def _row(what: str, behaviour: str, results: list[tuple[str, str]]) -> str:
    tests = ", ".join(dict.fromkeys(test for test, _ in results))
    passed = sum(outcome == "passed" for _, outcome in results)
    skipped = sum(outcome == "skipped" for _, outcome in results)
    if passed and passed + skipped == len(results):
        lost = "nothing"
    elif skipped == len(results):
        lost = "not run (skipped)"
    else:
        lost = "**FAILED: see the test log**"
    runs = f"{passed}/{len(results)}" + (f" ({skipped} skipped)" if skipped else "")
    return f"| {what} | {behaviour} | {lost} | {runs} | {tests} |"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--reliability-report")
    if not path or not _outcomes:
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    lines = [
        "# Reliability: faults and bad input tried, and what was lost",
        "",
        "Generated from the test outcomes by "
        "`.venv/bin/python -m pytest -m reliability --reliability-report=docs/reliability.md` "
        f"(commit {commit}, {datetime.now(UTC):%Y-%m-%d}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}). Every row is an automated test that runs in CI; "
        "*Lost* says `nothing` only when each of its runs passed, and each run asserts that the "
        "stored questions, vectors and index are unchanged or consistent afterwards. To "
        "reproduce a row, run the command in its last column (from the checkout, in the .venv that "
        "`python3 tasks.py test` sets up; PostgreSQL rows need the server of tests/conftest.py, "
        "else they skip).",
        "",
        "| fault or bad input | what askalike does | lost (or wrong) | runs passed | reproduce |",
        "|---|---|---|---|---|",
        *(_row(what, behaviour, results) for (what, behaviour), results in _outcomes.items()),
        "",
    ]
    Path(path).write_text("\n".join(lines))
