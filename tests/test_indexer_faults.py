"""kill -9 during ``askalike index``: the previous index stays usable, and a re-run ends in exactly
the state (rows and vector bytes) of a run that was never interrupted."""

from __future__ import annotations

import random
import signal
import subprocess

import pytest
from helpers import (
    ROOT,
    answering_index_size,
    collection,
    ended_or_stacks,
    index_command,
    kill_when,
    run_index,
    stopping_at_rows,
    stored_count,
    stored_state,
    wait_until_stopped,
    write_jsonl,
)

from askalike.indexer.directory import check_index

QUESTIONS = 3000


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, tiny_model):
    """The reference: half the collection indexed, then all of it, with no interruption."""
    directory = tmp_path_factory.mktemp("faults")
    records = collection(QUESTIONS)
    half = write_jsonl(directory / "half.jsonl", records[: QUESTIONS // 2])
    source = write_jsonl(directory / "all.jsonl", records)
    clean = directory / "clean"
    run_index(*index_command(half, clean, tiny_model, "--prune", "--yes"))
    run_index(*index_command(source, clean, tiny_model, "--prune", "--yes"))
    return directory, half, source, stored_state(clean, f"sqlite:///{clean / 'askalike.sqlite3'}")


def collection_variants() -> list[tuple[int | None, float]]:
    """Kill points: when a given number of rows is stored (mid-embedding), or after a delay."""
    rng = random.Random(7)
    by_rows = [(rng.randrange(QUESTIONS // 2, QUESTIONS - 100), 0.0) for _ in range(3)]  # not the last commit
    by_time = [(None, rng.uniform(1.0, 4.0)) for _ in range(2)]
    return by_rows + by_time


@pytest.mark.reliability("kill -9 during `askalike index` adding 1,500 questions to 1,500 "
                         "(mid-embedding at a stored-row count, or after a delay)",
                         "committed batches kept, the previous index opens and answers; the re-run "
                         "ends with the same rows and vector bytes as an uninterrupted run")
@pytest.mark.parametrize(("rows", "delay"), collection_variants())
@pytest.mark.slow
def test_kill_9_then_rerun_equals_a_clean_run(clean_run, tiny_model, rows, delay):
    directory, half, source, expected = clean_run
    index_dir = directory / f"killed-{rows}-{delay:.2f}"
    database = index_dir / "askalike.sqlite3"
    run_index(*index_command(half, index_dir, tiny_model, "--prune", "--yes"))  # the previous index

    command = index_command(source, index_dir, tiny_model, "--prune", "--yes")
    if rows is not None:
        command = stopping_at_rows(command, rows)
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(process, database, rows, delay)
    if rows is not None:  # killed mid-embedding, with part of the new questions committed
        assert rows <= stored_count(database) < QUESTIONS

    # the previous (or the finished) index still opens and answers
    assert answering_index_size(index_dir) in (QUESTIONS // 2, QUESTIONS)

    run_index(*index_command(source, index_dir, tiny_model, "--prune", "--yes"))
    assert stored_state(index_dir, f"sqlite:///{database}") == expected
    report = check_index(index_dir)
    assert report.ok, report.problems
    assert report.vectors == QUESTIONS


@pytest.mark.slow
def test_ctrl_c_says_what_the_run_kept_and_the_same_command_goes_on(clean_run, tiny_model):
    """Ctrl-C (SIGINT) mid-embedding: exit 130 with one line saying that the embedded questions
    are stored and how to go on; the same command then ends as an uninterrupted run."""
    directory, half, source, expected = clean_run
    index_dir = directory / "interrupted"
    database = index_dir / "askalike.sqlite3"
    run_index(*index_command(half, index_dir, tiny_model, "--prune", "--yes"))
    command = stopping_at_rows(index_command(source, index_dir, tiny_model, "--prune", "--yes"), 2000)
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    wait_until_stopped(process, database, 2000)
    process.send_signal(signal.SIGINT)  # pending until the run goes on, right after its commit
    process.send_signal(signal.SIGCONT)
    errors = ended_or_stacks(process)
    assert process.returncode == 130, errors
    assert errors.startswith("interrupted: the questions embedded so far are stored (--commit-every at a "
                             "time); run the same command to go on from there."), errors
    assert 2000 <= stored_count(database) < QUESTIONS
    run_index(*index_command(source, index_dir, tiny_model, "--prune", "--yes"))
    assert stored_state(index_dir, f"sqlite:///{database}") == expected
