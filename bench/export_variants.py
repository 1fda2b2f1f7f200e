"""Which int8 export of a transformer model to ship: each variant of its fused fp32 graph with
some roles of nodes in int8 (``train.onnx_export.quantizable_nodes``), measured by its mean
cosine to the fp32 graph, its sentences/s and its STSb and CQA figures against the fp32 graph's.

The choice is made on the dev splits only (STSb dev within 0.005 and CQA dev 2016 within 0.3 MAP
of the fp32 graph, then the fastest); the test splits are printed for the record. These
variants quantise activations per batch, which made vectors depend on their batch mates; the
shipped export keeps int8 weights only (docs/results.md, "Why not int8 activations").
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
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
from bench.encoding import sentences_per_second
from bench.harness import markdown_table, real_questions, write_section

VARIANTS = {  # roles in int8; the fused attention takes the query/key/value projection
    "fp32": (),
    "feed-forward input, embeddings": ("expanding", "embeddings"),
    "+ attention output": ("expanding", "square", "embeddings"),
    "+ query/key/value": ("expanding", "square", "attention", "embeddings"),
    "feed-forward input and output, embeddings": ("expanding", "contracting", "embeddings"),
    "every MatMul, embeddings": ("expanding", "square", "contracting", "attention", "embeddings"),
}
STSB_BOUND, CQA_BOUND = 0.005, 0.3
STSB_SPLITS, CQA_SPLITS = ("dev", "test"), ("dev2016", "test2016", "test2017")


def figures(encoder: Encoder, data_dir: Path) -> dict[str, float]:
    result = {f"stsb {split}": evaluate_stsb(encoder, data_dir, split)["pearson"] for split in STSB_SPLITS}
    for split in CQA_SPLITS:
        cqa_split = load_cqa_split(data_dir, split)
        result[split] = 100 * cqa_map(cqa_split, Reranker(encoder).scores(cqa_split.questions))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/accurate", help="a transformer model directory")
    parser.add_argument("--questions", type=int, default=1000, help="texts for cosine and speed")
    args = parser.parse_args()
    data_dir = resolve_data_dir(None)
    texts = real_questions(args.questions, data_dir)
    rows: list[list[str]] = []
    measured: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        fp32_dir = Path(scratch) / "fp32"
        shutil.copytree(args.model, fp32_dir, ignore=shutil.ignore_patterns(ONNX_FILE))
        export_model(fp32_dir, quantize=False)
        roles = quantizable_nodes(fp32_dir / ONNX_FILE)
        reference = load_encoder(fp32_dir).encode(texts)
        for name, chosen in VARIANTS.items():
            directory = fp32_dir
            if chosen:
                directory = Path(scratch) / f"variant{len(measured)}"
                shutil.copytree(fp32_dir, directory, ignore=shutil.ignore_patterns(ONNX_FILE))
                quantize_nodes(fp32_dir / ONNX_FILE, directory / ONNX_FILE,
                               [node for role in chosen for node in roles[role]])
            encoder = load_encoder(directory)
            speed = max(sentences_per_second(encoder.encode, texts, 256) for _ in range(3))
            cosine = float(np.mean(np.sum(encoder.encode(texts) * reference, axis=1)))
            measured[name] = {"cosine": cosine, "speed": speed, **figures(encoder, data_dir)}
            print(name, measured[name], flush=True)
    base = measured["fp32"]

    def within_on_dev(values: dict[str, float]) -> bool:
        return (abs(values["stsb dev"] - base["stsb dev"]) <= STSB_BOUND
                and abs(values["dev2016"] - base["dev2016"]) <= CQA_BOUND)

    chosen_name = max((name for name in measured if within_on_dev(measured[name])),
                      key=lambda name: measured[name]["speed"])
    for name, values in measured.items():
        rows.append([f"**{name}**" if name == chosen_name else name, f"{values['cosine']:.4f}",
                     f"{values['speed']:,.0f}", f"{values['speed'] / base['speed']:.2f}x",
                     *(f"{values[f'stsb {split}'] - base[f'stsb {split}']:+.4f}" for split in STSB_SPLITS),
                     *(f"{values[split] - base[split]:+.2f}" for split in CQA_SPLITS),
                     "yes" if within_on_dev(values) else "no"])
    body = (f"`{args.model}`'s fused fp32 export ({base['speed']:,.0f} sentences/s; STSb dev/test r "
            f"{base['stsb dev']:.4f} / {base['stsb test']:.4f}; CQA MAP "
            + " / ".join(f"{base[split]:.2f}" for split in CQA_SPLITS)
            + f") against its int8 variants: mean cosine to fp32 and sentences/s on {len(texts):,} real "
            "questions (the encoder's own batching, every core), figures as differences to fp32. "
            f"Chosen on dev only: the fastest within {STSB_BOUND} STSb dev r and {CQA_BOUND} CQA dev "
            f"2016 MAP of fp32 (in bold: {chosen_name}).\n\n"
            + markdown_table(["int8", "cosine", "sentences/s", "vs fp32", "STSb dev", "STSb test",
                              "CQA dev 2016", "test 2016", "test 2017", "within on dev"], rows))
    write_section("quantization", "Which int8 export to ship (issue: runtime)",
                  f"python -m bench.export_variants --model {args.model} --questions {args.questions}", body)


if __name__ == "__main__":
    main()
