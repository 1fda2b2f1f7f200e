"""Does a cross-encoder (both questions read together by one transformer) tell "the same question"
from "the same topic" better than the bi-encoder's cosine (issue 50)? The accurate model's
backbone with a linear head on its [CLS] vector is trained on CQA train (PerfectMatch against
Relevant and Irrelevant, both orders of each pair) with binary cross-entropy; its threshold is
chosen on dev 2016 and its PerfectMatch F1 on test 2016 set beside the cosine threshold's.

    python -m bench.experiments.cross_encoder [--epochs 2] [--max-length 160]

Measured 2026-11-27 (2 CPU cores, 2 epochs of 5,338 ordered pairs, batches of 16, 20 min):
PerfectMatch F1 on test 2016 0.454 after epoch 1 and 0.426 after epoch 2 (thresholds chosen on
dev 2016, where it reached 0.363 / 0.381), below the calibrated cosine's (docs/results.md,
"Same question"): 2,669 training pairs with 235 PerfectMatch are too few for a cross-encoder to
learn the distinction the bi-encoder's fine-tuning already drew.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from askalike.retrieval.judgement import f1_at
from bench.experiments.same_question import best_threshold, labelled_pairs

BACKBONE = "models/accurate/backbone"


class CrossEncoder(torch.nn.Module):
    def __init__(self, backbone: str) -> None:
        super().__init__()
        self.backbone = AutoModel.from_pretrained(backbone)
        self.head = torch.nn.Linear(self.backbone.config.hidden_size, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.backbone(**batch).last_hidden_state[:, 0]).squeeze(-1)


def scores(model: CrossEncoder, tokenizer, rows, max_length: int, batch_size: int = 32) -> np.ndarray:
    model.eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            batch = tokenizer([a for a, _, _ in chunk], [b for _, b, _ in chunk], truncation=True,
                              max_length=max_length, padding=True, return_tensors="pt")
            forward = torch.sigmoid(model(batch))
            backward = torch.sigmoid(model(tokenizer([b for _, b, _ in chunk], [a for a, _, _ in chunk],
                                                     truncation=True, max_length=max_length,
                                                     padding=True, return_tensors="pt")))
            out.append(((forward + backward) / 2).numpy())
    return np.concatenate(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=160)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--relevant-target", type=float, default=0.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    pairs = labelled_pairs()
    tokenizer = AutoTokenizer.from_pretrained(BACKBONE)
    model = CrossEncoder(BACKBONE)
    target = {"PerfectMatch": 1.0, "Relevant": args.relevant_target, "Irrelevant": 0.0}
    train = [row for a, b, r in pairs["train"] for row in ((a, b, target[r]), (b, a, target[r]))]
    steps = args.epochs * ((len(train) + args.batch_size - 1) // args.batch_size)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: min(1.0, (step + 1) / (0.1 * steps)) * max(0.0, 1 - step / steps))
    positive_weight = torch.tensor(3.0)
    started = time.time()
    for epoch in range(args.epochs):
        random.shuffle(train)
        model.train()
        for start in range(0, len(train), args.batch_size):
            chunk = train[start:start + args.batch_size]
            batch = tokenizer([a for a, _, _ in chunk], [b for _, b, _ in chunk], truncation=True,
                              max_length=args.max_length, padding=True, return_tensors="pt")
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model(batch), torch.tensor([t for *_, t in chunk]), pos_weight=positive_weight)
            loss.backward()
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            if start // args.batch_size % 20 == 0:
                print(f"epoch {epoch} step {start // args.batch_size} loss {loss.item():.3f} "
                      f"{time.time() - started:.0f}s", flush=True)
        judged = {name: scores(model, tokenizer, pairs[name], args.max_length)
                  for name in ("dev2016", "test2016")}
        for positive in ({"PerfectMatch"}, {"PerfectMatch", "Relevant"}):
            y = {name: np.array([float(r in positive) for *_, r in pairs[name]]) for name in judged}
            dev_f1, threshold = best_threshold(judged["dev2016"], y["dev2016"])
            test_f1 = f1_at(judged["test2016"], y["test2016"], threshold)
            print(f"epoch {epoch} {'+'.join(sorted(positive))}: cross-encoder F1 dev {dev_f1:.3f}, "
                  f"test 2016 {test_f1:.3f} (threshold {threshold:.3f})", flush=True)


if __name__ == "__main__":
    main()
