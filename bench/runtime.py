"""Start-up and query latency as a user meets them, and encoding speed, in one run:
`askalike --help`, a one-shot `search` with each shipped model on a 10k-question index, the
TUI's time to its first frame, and encoding sentences/s of each shipped model against
sentence-transformers fp32 all-MiniLM-L6-v2 on the same texts. Each command runs in a fresh
process, as a user starts it; the figure is the median of several runs.

    .venv/bin/python -m bench.runtime [--questions 10000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from askalike.core.onnx_encoder import OnnxEncoder
from bench.encoding import askalike_model, sentence_transformers_minilm, sentences_per_second
from bench.harness import ROOT, markdown_table, real_questions, write_section

SHIPPED = ("models/accurate", "models/fast")
PEER_BATCHES = (8, 32, 256)  # sentence-transformers' default is 32
PEER = "all-MiniLM-L6-v2 (sentence-transformers, fp32)"
QUERIES = ["how do i renew my residence permit", "cheap second hand car", "good school for kids",
           "salary not paid by my sponsor", "best place for brunch on friday",
           "exit permit for my wife", "driving licence transfer from india"]
FIRST_FRAME = textwrap.dedent("""
    import sys
    from askalike.app.tui import SearchApp
    from askalike.retrieval.searcher import Searcher

    async def leave(pilot):
        await pilot.pause()  # the first frame is composed and painted
        pilot.app.exit()

    SearchApp(lambda: Searcher(sys.argv[1], None)).run(headless=True, auto_pilot=leave)
""")


def median_seconds(command: list[str], repeats: int) -> float:
    """Median wall time of ``command`` run ``repeats`` times in fresh processes (after one warm-up
    run, so that the file cache is warm as on a machine in use)."""
    times = []
    for run in range(repeats + 1):
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        if run:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def python(*code_or_args: str) -> list[str]:
    return [sys.executable, *code_or_args]


def build_index(directory: Path, model: str, texts: list[str]) -> None:
    from askalike.indexer.build import IndexOptions, index_sources

    source = directory / "questions.txt"
    source.write_text("\n".join(text.replace("\n", " ") for text in texts) + "\n")
    index_sources(directory / "index", [source], str(ROOT / model), options=IndexOptions(show_progress=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10_000, help="questions in the search index")
    parser.add_argument("--encode-questions", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    texts = real_questions(args.questions)
    rows: list[tuple[str, str, str, str]] = []

    def report(what: str, seconds: float, target: str, met: bool) -> None:
        rows.append((what, f"{seconds:.2f} s", target, "met" if met else "**missed**"))
        print(rows[-1], flush=True)

    imports_cli = median_seconds(python("-c", "import typer, rich.console"), args.repeats)
    imports_query = median_seconds(python("-c", "import numpy, faiss, sqlalchemy, typer"), args.repeats)
    help_s = median_seconds(python("-m", "askalike.app", "--help"), args.repeats)
    report("`askalike --help`", help_s, f"<= 0.3 s and <= 3x typer+rich ({3 * imports_cli:.2f} s)",
           help_s <= min(0.3, 3 * imports_cli))
    with tempfile.TemporaryDirectory() as scratch:
        for model in SHIPPED:
            directory = Path(scratch) / Path(model).name
            directory.mkdir()
            build_index(directory, model, texts)
            index = str(directory / "index")
            searches = [median_seconds(python("-m", "askalike.app", "search", query, "--index", index,
                                              "--json"), 1)
                        for query in QUERIES[: args.repeats]]
            search_s = statistics.median(searches)
            bound = 1.5 if model.endswith("accurate") else 1.0
            report(f"one-shot `search` on {len(texts):,} questions, `{model}`", search_s,
                   f"<= {bound} s" + ("" if model.endswith("accurate")
                                      else f" and <= 1.8x numpy+faiss+sqlalchemy+typer "
                                           f"({1.8 * imports_query:.2f} s)"),
                   search_s <= (bound if model.endswith("accurate") else min(bound, 1.8 * imports_query)))
            if model == SHIPPED[0]:
                frame_s = median_seconds(python("-c", FIRST_FRAME, index), args.repeats)
                report(f"TUI first frame (`{model}` index)", frame_s, "<= 2 s", frame_s <= 2.0)
    encode_texts = texts[: args.encode_questions]
    # each at its best batch size: the peer's varies with it, askalike's encoders pick their own
    peer = sentence_transformers_minilm()
    peer_speeds = {size: sentences_per_second(peer, encode_texts, size) for size in PEER_BATCHES}
    speeds = {PEER: max(peer_speeds.values())}
    for model in SHIPPED:
        speeds[model] = sentences_per_second(askalike_model(str(ROOT / model)), encode_texts, 256)
    speed_rows = [(f"`{name}`", f"{speed:,.0f}", f"{speed / speeds[PEER]:.2f}x")
                  for name, speed in speeds.items()]
    accurate_ratio = speeds["models/accurate"] / speeds[PEER]
    body = (f"Fresh processes, median of {args.repeats} runs after a warm-up; the imports alone take "
            f"{imports_cli:.2f} s (typer+rich) and {imports_query:.2f} s (numpy+faiss+sqlalchemy+typer). "
            f"Search indexes: {len(texts):,} real questions (`bench.harness.real_questions`), flat.\n\n"
            + markdown_table(["what", "measured", "target", ""], rows)
            + f"\n\nEncoding the first {len(encode_texts):,} of those questions, one process; the peer at "
            + ", ".join(f"batch {size}: {speed:,.0f}/s" for size, speed in peer_speeds.items())
            + " (its best is the reference), askalike's encoders asked for batch 256 (the ONNX encoder "
            f"runs at most {OnnxEncoder.max_batch} texts and {OnnxEncoder.max_batch_chars} characters "
            "a call) "
            f"(`models/accurate` is {accurate_ratio:.2f}x the peer; target >= 2.3x: "
            + ("met" if accurate_ratio >= 2.3 else "**missed**") + "):\n\n"
            + markdown_table(["model", "sentences/s", "vs peer"], speed_rows))
    write_section("runtime", "Start-up, one-shot search and encoding speed (issue: runtime)",
                  f"python -m bench.runtime --questions {args.questions} --encode-questions "
                  f"{args.encode_questions} --repeats {args.repeats}", body)


if __name__ == "__main__":
    main()
