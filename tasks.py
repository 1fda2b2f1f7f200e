#!/usr/bin/env python3
"""Set up the virtual environment in .venv and run the project's jobs.

Needs nothing but Python (>= 3.11) and pip: `python3 tasks.py demo` or `python3 tasks.py test`.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
INSTALL_INPUTS = ("pyproject.toml", "constraints-cpu.txt")
EXTRAS = "dev,train,ray"  # the dev tools, training (torch) and Ray, so that every test runs
# the shipped models against the baselines on CQA subtask B (models/accurate is the default model)
DEMO = ["askalike", "eval", "cqa",
        "--split", "dev2016", "--split", "test2016", "--split", "test2017",
        "--model", "models/accurate", "--model", "models/fast", "--system", "ir", "--system", "bm25"]


def run(*command: str | Path) -> None:
    print("+", " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], cwd=ROOT, check=True)


def ensure_environment() -> None:
    """Create .venv and install the project with its extras; skipped when nothing changed."""
    if not (BIN / "python").exists():
        venv.create(VENV, with_pip=True)
    digest = hashlib.sha256(EXTRAS.encode() + b"".join((ROOT / name).read_bytes() for name in INSTALL_INPUTS))
    stamp = VENV / "askalike-install.sha256"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    run(BIN / "python", "-m", "pip", "install", "--quiet", "-c", "constraints-cpu.txt",
        "-e", f".[{EXTRAS}]")
    stamp.write_text(digest.hexdigest())


def demo() -> None:
    run(BIN / DEMO[0], *DEMO[1:])


BROWSER_NOTE = ("note: the search page's test needs a headless browser and will be skipped: install "
                "Chromium and its driver (Debian: apt-get install chromium chromium-driver)")


def test() -> None:
    import shutil

    # what the search page's test drives (tests/test_serve_page.py); pip cannot install a browser
    if not Path("/usr/bin/chromium").exists() or shutil.which("chromedriver") is None:
        print(BROWSER_NOTE, flush=True)
    run(BIN / "ruff", "check", ".")
    run(BIN / "python", "-m", "pytest", "-q")


JOBS = {"demo": demo, "test": test}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in JOBS:
        sys.exit(f"usage: python3 tasks.py {{{'|'.join(JOBS)}}}")
    try:
        ensure_environment()
        JOBS[sys.argv[1]]()
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode)
