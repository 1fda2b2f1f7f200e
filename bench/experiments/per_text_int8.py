"""Can `models/accurate` be fast again without its vectors depending on their batch (issue 55)?
Dynamic int8 activation quantisation (ONNX Runtime's, one scale per input tensor) made a text's
vector depend on its batch mates, so the shipped export keeps int8 weights only and computes in
fp32. Run one text per call, the tensor *is* the text: its scale is its own, with no padding, and
its vector cannot depend on anything else. One call of one short text uses a core poorly, so the
texts are spread over one single-threaded session per core.

Measured here, each on the same real questions: the shipped export and the dynamically quantised
one (every MatMul and the fused attention's projections in int8, as ``quantize_nodes`` makes
them), at one text per call on 1 thread and on ``--threads`` sessions of 1 thread; the peer
(all-MiniLM-L6-v2 through sentence-transformers, torch at ``--threads`` threads) at its best
batch size, in a fresh process under the same thread settings; the mean cosine of each export's
vectors to the fp32 export's, and STSb dev r and CQA dev 2016 MAP (dev splits only).

    python -m bench.experiments.per_text_int8 [--questions 400] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from askalike.core.data_dir import resolve_data_dir
from askalike.core.encoder import Encoder
from askalike.core.loader import load_encoder
from askalike.core.model_dir import ONNX_FILE
from askalike.core.sts_evaluation import evaluate_stsb
from askalike.retrieval.cqa_runs import load_cqa_split
from askalike.retrieval.model_card import cqa_map
from askalike.retrieval.reranker import Reranker
from askalike.train.onnx_export import quantizable_nodes, quantize_nodes
from askalike.train.trained_model import export_model
from bench.harness import real_questions, run_child

PEER_BATCHES = (1, 32, 256)


def one_text_a_call(sessions: Sequence[Encoder], texts: Sequence[str]) -> float:
    """Sentences/s of ``texts`` embedded one a call, spread over ``sessions`` in threads."""
    shares = [texts[i::len(sessions)] for i in range(len(sessions))]
    with ThreadPoolExecutor(len(sessions)) as pool:
        list(pool.map(lambda pair: pair[0].encode(pair[1][:4], 1), zip(sessions, shares, strict=True)))
        started = time.perf_counter()
        list(pool.map(lambda pair: pair[0].encode(pair[1], 1), zip(sessions, shares, strict=True)))
    return len(texts) / (time.perf_counter() - started)


def peer_speed(questions: int) -> None:
    """(In a child process.) The peer's best sentences/s over PEER_BATCHES, printed as JSON."""
    from bench.encoding import sentence_transformers_minilm

    texts = real_questions(questions, resolve_data_dir())
    encode = sentence_transformers_minilm()
    best = 0.0
    for batch in PEER_BATCHES:
        encode(texts[:batch], batch)
        started = time.perf_counter()
        encode(texts, batch)
        best = max(best, len(texts) / (time.perf_counter() - started))
    print(json.dumps({"best": best}))


def dev_figures(encoder: Encoder, data_dir: Path) -> tuple[float, float]:
    split = load_cqa_split(data_dir, "dev2016")
    return (evaluate_stsb(encoder, data_dir, "dev")["pearson"],
            100 * cqa_map(split, Reranker(encoder).scores(split.questions)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_only:
        peer_speed(args.questions)
        return
    data_dir = resolve_data_dir()
    texts = real_questions(args.questions, data_dir)
    peer = run_child("bench.experiments.per_text_int8", ["--peer-only", "--questions", str(args.questions)],
                     "the peer", args.threads)["best"]
    print(f"peer, best batch, {args.threads} threads: {peer:.1f} sentences/s", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        fp32, per_text = Path(scratch) / "fp32", Path(scratch) / "per-text"
        shutil.copytree("models/accurate", fp32, ignore=shutil.ignore_patterns(ONNX_FILE))
        export_model(fp32, quantize=False)
        shutil.copytree(fp32, per_text, ignore=shutil.ignore_patterns(ONNX_FILE))
        quantize_nodes(fp32 / ONNX_FILE, per_text / ONNX_FILE,
                       [node for nodes in quantizable_nodes(fp32 / ONNX_FILE).values() for node in nodes])
        reference = load_encoder(fp32).encode(texts)
        for name, spec in (("shipped export (models/accurate/model.onnx)", "models/accurate"),
                           ("int8 activations, one text a call", str(per_text))):
            alone = load_encoder(spec, threads=1)
            vectors = np.concatenate([alone.encode([text], 1) for text in texts])
            one_thread = one_text_a_call([alone], texts)
            spread = one_text_a_call([load_encoder(spec, threads=1) for _ in range(args.threads)], texts)
            stsb, cqa = dev_figures(alone, data_dir)
            cosine = float(np.mean(np.sum(vectors * reference, axis=1)))
            print(f"{name}: 1 thread {one_thread:.1f}/s; {args.threads} sessions of 1 thread "
                  f"{spread:.1f}/s ({spread / peer:.2f}x the peer); cosine to fp32 {cosine:.4f}; "
                  f"STSb dev r {stsb:.4f}; CQA dev 2016 MAP {cqa:.2f}", flush=True)


if __name__ == "__main__":
    main()
