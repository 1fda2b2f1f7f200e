"""How much a text's vector depends on its batch, for the shipped models as queries run them:
each of N real questions embedded alone, then all of them in batches of 8 and 256 (the
encoders' own length-sorted batching) and among long texts; the largest absolute difference of
any component and the lowest cosine to the vector alone (in float64; the README's bound).

    python -m bench.experiments.batch_dependence [--questions 1000] [--model accurate fast]
"""

from __future__ import annotations

import argparse

import numpy as np

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
        runs = {"batches of 8": encoder.encode(texts, batch_size=8),
                "batches of 256": encoder.encode(texts, batch_size=256),
                "among long texts": np.stack([encoder.encode([text, *long_texts], batch_size=256)[0]
                                              for text in texts[:100]])}
        for name, vectors in runs.items():
            difference = np.abs(vectors - alone[: len(vectors)]).max()
            cosine = np.einsum("ij,ij->i", vectors, alone[: len(vectors)], dtype=np.float64).min()
            print(f"| {model} | {len(vectors)} | {name} | {difference:.2e} | {cosine:.9f} |")


if __name__ == "__main__":
    main()
