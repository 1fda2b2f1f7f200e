"""What every benchmark shares: the questions it runs on, the machine it ran on, the thread
settings every system it compares runs under, the order it runs them in, and the report
(docs/benchmarks.md) whose sections each script rewrites with its own table."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import resource
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from askalike.core.cqa_questions import read_cqa_collection
from askalike.core.data_dir import resolve_data_dir
from askalike.core.datasets import read_conversations

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks.md"
# training-side CQA files (never the test sets), the first source of real questions
QUESTION_FILES = (
    "semeval-cqa/SemEval2016-Task3-CQA-QL-train-part1-subtaskB-reconstructed.xml",
    "semeval-cqa/SemEval2016-Task3-CQA-QL-train-part2.xml",
    "semeval-cqa/SemEval2016-Task3-CQA-QL-dev.xml",
    "semeval-cqa/extra-2015-reformatted/SemEval2015-Task3-CQA-QL-train-reformatted-excluding-2016-questions-cleansed.xml",
    "semeval-cqa/extra-2015-reformatted/SemEval2015-Task3-CQA-QL-dev-reformatted-excluding-2016-questions-cleansed.xml",
)
# then questions people asked in conversations (turns ending in "?")
CONVERSATION_FILES = ("reddit_2015", "self_dialogue", "dailydialog", "chitchat")


def _questions(data_dir: Path) -> Iterator[str]:
    for relative in QUESTION_FILES:
        for question in read_cqa_collection(data_dir / relative):
            yield question.text
    for stem in CONVERSATION_FILES:
        for pair in read_conversations(data_dir / "conversations" / f"{stem}.tsv.gz"):
            if pair.input.rstrip().endswith("?"):
                yield pair.input


def real_questions(count: int, data_dir: Path | None = None) -> list[str]:
    """``count`` distinct real questions: every Qatar Living question of the CQA training and dev
    files (subject + body), then questions from conversation turns."""
    seen: dict[str, None] = {}
    for text in _questions(data_dir or resolve_data_dir()):
        if text.strip():
            seen.setdefault(text, None)
            if len(seen) == count:
                return list(seen)
    raise SystemExit(f"only {len(seen)} distinct questions found, {count} asked")


def conversation_texts(count: int, data_dir: Path | None = None) -> list[str]:
    """The first ``count`` distinct texts (inputs and responses) of the conversation files
    (conversations/*.tsv.gz, about 2.4M of them), files in name order, texts in file order."""
    seen: dict[str, None] = {}
    for path in sorted((data_dir or resolve_data_dir()).glob("conversations/*.tsv.gz")):
        for pair in read_conversations(path):
            for text in (pair.input.strip(), pair.response.strip()):
                if text:
                    seen.setdefault(text, None)
                    if len(seen) == count:
                        return list(seen)
    raise SystemExit(f"only {len(seen):,} distinct conversation texts found, {count:,} asked")


def varied_questions(count: int, data_dir: Path | None = None) -> list[str]:
    """``count`` questions for the large sizes: the real ones, then each again with a variation
    (a numbered suffix and a word dropped in turn), so that every text is distinct."""
    base = real_questions(10_000, data_dir)
    result = base[:count]
    round_ = 1
    while len(result) < count:
        for text in base:
            words = text.split()
            drop = round_ % max(len(words), 1)
            result.append(" ".join(words[:drop] + words[drop + 1 :]) + f" (#{round_})")
            if len(result) == count:
                break
        round_ += 1
    return result


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def int8_instructions() -> str:
    """The CPU's instructions for int8 products, which set how fast an int8 export runs: with
    VNNI the int8 product sums u8 x s8 products in int32 in one instruction."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), None)
    except OSError:
        flags = None
    if flags is None:  # no x86 flags line (another architecture, another system)
        return "instructions unknown"
    for flag, name in (("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI")):
        if flag in flags:
            return name
    return "AVX2, no VNNI" if "avx2" in flags else "no AVX2"


def memory_gib() -> float:
    try:
        match = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        return int(match.group(1)) / 2**20 if match else 0.0
    except OSError:
        return 0.0


def versions(packages: Sequence[str]) -> str:
    found = []
    for name in packages:
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{name} {version(name)}")
    return ", ".join(found)


def machine() -> str:
    return (f"{cpu_name()} ({int8_instructions()}), {os.cpu_count()} cores, {memory_gib():.0f} GiB RAM; "
            f"Python {platform.python_version()}; "
            + versions(["torch", "faiss-cpu", "faiss-gpu-cu12", "sentence-transformers", "transformers",
                        "numpy", "sqlalchemy"]))


T = TypeVar("T")


def thread_env(threads: int) -> dict[str, str]:
    """The environment that caps a process at ``threads`` compute threads, whichever libraries it
    computes with: OpenMP (FAISS, and torch's intra-op pool, which follows OMP_NUM_THREADS), MKL
    and OpenBLAS (numpy), and Hugging Face tokenizers' own pool off. A benchmark gives every
    system it compares the same one (ONNX Runtime reads none of these: askalike passes the
    count to its sessions itself)."""
    count = str(threads)
    return {"OMP_NUM_THREADS": count, "MKL_NUM_THREADS": count, "OPENBLAS_NUM_THREADS": count,
            "TOKENIZERS_PARALLELISM": "false"}


def describe_threads(threads: int) -> str:
    """``thread_env(threads)`` as a report states it."""
    return ", ".join(f"`{name}={value}`" for name, value in thread_env(threads).items())


def alternated(systems: Sequence[T], rounds: int) -> list[list[T]]:
    """The order to run ``systems`` in, round by round: as given, then reversed, and so on
    (A B, B A, A B, ...), so that no system always runs first or last on a machine whose load
    drifts."""
    return [list(systems) if number % 2 == 0 else list(reversed(systems)) for number in range(rounds)]


def load_average() -> float:
    """The machine's 1-minute load average (other programs' demand on its cores, and ours)."""
    return os.getloadavg()[0]


def run_child(module: str, arguments: Sequence[str], what: str, threads: int | None = None,
              python: str | None = None) -> dict[str, Any]:
    """``python -m module *arguments`` in a fresh process (so that its peak RSS is its own),
    under ``thread_env(threads)`` if given, by ``python`` if given (a peer's own interpreter; a
    module path ending in .py then runs as a script): the JSON object its last line prints; its
    stderr if it fails."""
    command = ([python or sys.executable, module] if module.endswith(".py")
               else [python or sys.executable, "-m", module])
    child = subprocess.run([*command, *arguments], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, **(thread_env(threads) if threads else {})})
    if child.returncode:
        raise SystemExit(f"{what} failed:\n{child.stderr}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def peak_rss_mib() -> float:
    """This process's own peak resident memory so far: VmHWM, the high-water mark of its memory
    since it started its program. (ru_maxrss is no measure of a child's own: Linux carries the
    parent's high-water mark over the fork and exec, so a child of a parent holding 700 MiB
    reports at least 700 MiB.)"""
    with contextlib.suppress(OSError, AttributeError):
        match = re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())
        if match:
            return int(match.group(1)) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """The mean share of each query's exact top k (a row of ``exact``) among those ``found``."""
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_section(name: str, title: str, command: str, body: str, measured: datetime | None = None,
                  on: str | None = None) -> None:
    """Replace (or append) one section of docs/benchmarks.md, stamped with machine and date
    (``measured``: when the figures were taken, if not now; ``on``: the machine they were taken
    on, if not this one)."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    stamp = f"{measured or datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {on or machine()}"
    section = (f"{start}\n## {title}\n\nMeasured {stamp}.\n"
               f"Rerun: `{command}`\n\n{body}\n{end}")
    REPORT.parent.mkdir(exist_ok=True)
    text = REPORT.read_text() if REPORT.exists() else (
        "# Benchmarks\n\nEach section is written by the script named in it (`bench/`); rerun it to "
        "refresh the figures. Ratios compare runs in the same process on the same machine.\n")
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    REPORT.write_text(text + ("" if text.endswith("\n") else "\n"))
    print(section)
