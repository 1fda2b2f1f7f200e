"""Exact nearest neighbours on a GPU in torch, for grouping a whole collection (``duplicates``)
where FAISS has no GPU support: what a FAISS flat inner-product index answers (ties aside)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from askalike.train.devices import float32_products

QUERY_BLOCK = 1024  # queries a matrix product: 1,024 x 1,000,000 float32 scores take 4 GB


class ExactSearch:
    """``search(queries, k)`` as a FAISS index's: (inner products, ids), best first, each row
    padded with -1 ids where fewer than ``k`` vectors are held."""

    def __init__(self, ids: np.ndarray, vectors: np.ndarray, device: torch.device) -> None:
        self.device = device  # torch.tensor copies: a store's arrays may be read-only
        self.ids = torch.tensor(ids, dtype=torch.int64, device=device)
        self.vectors = torch.tensor(vectors, dtype=torch.float32, device=device)

    @classmethod
    def of_chunks(cls, chunks: Iterable[tuple[np.ndarray, np.ndarray]], device: torch.device) -> ExactSearch:
        """From (ids, vectors) chunks, as a store yields them."""
        parts = list(chunks)
        if not parts:
            return cls(np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32), device)
        return cls(np.concatenate([ids for ids, _ in parts]), np.concatenate([v for _, v in parts]), device)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        found = min(k, len(self.ids))
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        with float32_products():
            for start in range(0, len(queries), QUERY_BLOCK):
                block = torch.tensor(queries[start:start + QUERY_BLOCK], dtype=torch.float32,
                                     device=self.device)
                top, where = torch.topk(block @ self.vectors.T, found, dim=1)
                end = start + len(block)
                scores[start:end, :found] = top.cpu().numpy()
                ids[start:end, :found] = self.ids[where].cpu().numpy()
        return scores, ids
