"""How much a text's vector depends on its batch, for the shipped models as queries run them:
each of N real questions embedded alone, then all of them in batches of 8 and 256 (the
encoders' own length-sorted batching) and among long texts; the largest absolute difference of
any component and the lowest cosine to the vector alone (in float64; the README's bound).

An encoder whose calls are capped (the ONNX encoder: ``max_batch`` texts and ``max_batch_chars``
characters a call) is also run with the caps lifted ("uncapped" rows), so that a text shares
its call with other texts and their padding as it would in a batch of that size.

    python -m bench.experiments.batch_dependence [--questions 1000] [--model accurate fast]
"""

from __future__ import annotations

import argparse

import numpy as np

from askalike.core.encoder import BatchedEncoder
from askalike.core.loader import load_encoder
from askalike.core.model_dir import shipped_model
from bench.harness import real_questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--model", nargs="+", default=["accurate", "fast"])
    args = parser.parse_args()
    texts = real_questions(args.questions)
    long_texts = [" ".join(texts[i:i + 40]) for i in range(0, 400, 40)]
    print("| model | texts | batching | max abs difference | min cosine |\n|---|---|---|---|---|")
    for model in args.model:
        encoder = load_encoder(shipped_model(model))
        alone = np.stack([encoder.encode([text])[0] for text in texts])
        runs = batchings(encoder, texts, long_texts, "")
        if encoder.max_batch_chars is not None or encoder.max_batch < 256:
            encoder.max_batch, encoder.max_batch_chars = 256, None
            runs |= batchings(encoder, texts, long_texts, ", uncapped")
        for name, vectors in runs.items():
            difference = np.abs(vectors - alone[: len(vectors)]).max()
            cosine = np.einsum("ij,ij->i", vectors, alone[: len(vectors)], dtype=np.float64).min()
            print(f"| {model} | {len(vectors)} | {name} | {difference:.2e} | {cosine:.9f} |")


def batchings(encoder: BatchedEncoder, texts: list[str], long_texts: list[str],
              label: str) -> dict[str, np.ndarray]:
    """The vectors of ``texts`` in batches of 8 and 256, and of their first 100 among long texts."""
    return {f"batches of 8{label}": encoder.encode(texts, batch_size=8),
            f"batches of 256{label}": encoder.encode(texts, batch_size=256),
            f"among long texts{label}": np.stack([encoder.encode([text, *long_texts], batch_size=256)[0]
                                                  for text in texts[:100]])}


if __name__ == "__main__":
    main()
