"""``askalike tune BASE --collection FILE --out DIR`` for a DAN (``models/fast``): no labels.

A collection's frequent words that the DAN's vocabulary lacks would share hashed OOV buckets.
They get rows of their own, set as the teacher-initialised vocabulary was built
(``train.teacher_init``): from the teacher's embedding of each word alone, here through the
linear map (ridge least squares) that takes the teacher's vectors of the vocabulary's rarest
known words to the DAN's trained rows of those words, since a trained DAN's rows have moved
from the PCA they started at and a new word is rare like them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from askalike.core.model_dir import ModelError
from askalike.core.text import Vocabulary, tokenize
from askalike.train.distillation import teacher_vectors
from askalike.train.modules import DanModule
from askalike.train.trained_model import TrainedModel, load_model, save_model

MIN_COUNT = 2  # a collection word needs this many occurrences to get a row
MAX_NEW_WORDS = 20_000
FIT_WORDS = 5_000  # the vocabulary's rarest words whose rows fit the teacher -> DAN map
RIDGE = 1e-2


def missing_words(vocabulary: Vocabulary, texts: Sequence[str], min_count: int = MIN_COUNT) -> list[str]:
    """The collection's words outside the vocabulary seen ``min_count`` times, most frequent first."""
    counts = Counter(token for text in texts for token in tokenize(text)
                     if vocabulary.known_id(token) is None and any(c.isalpha() for c in token))
    frequent = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return frequent[:MAX_NEW_WORDS]


def fit_map(source: np.ndarray, target: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """W minimising |source W - target|^2 + ridge |W|^2."""
    gram = source.T @ source + ridge * np.eye(source.shape[1])
    return np.linalg.solve(gram, source.T @ target)


def extended_dan(encoder: DanModule, words: list[str], rows: np.ndarray) -> DanModule:
    """``encoder`` with ``words`` added after its vocabulary's words (rows ``rows``); the OOV
    buckets, bigrams and the rest keep their weights."""
    old = encoder.vocabulary
    vocabulary = Vocabulary(old.words + tuple(words), old.oov_buckets, old.bigram_buckets)
    extended = DanModule(vocabulary, **encoder.config())
    state = encoder.state_dict()
    table = state["words.weight"]
    known = len(old.words) + 1  # padding and the known words
    state["words.weight"] = torch.cat([table[:known], torch.from_numpy(rows).to(table.dtype), table[known:]])
    extended.load_state_dict(state)
    return extended.eval()


def adapt_to_collection(base: str, texts: Sequence[str], out: Path, teacher: str,
                        cache: Path, show_progress: bool = True) -> dict[str, Any]:
    """Save ``base`` with rows for the collection's missing words as the model directory
    ``out``; returns what was done (for metrics.json)."""
    model = load_model(base)
    encoder = model.encoder
    if not isinstance(encoder, DanModule):
        raise ModelError(f"{base}: --collection adapts a DAN's vocabulary (models/fast); "
                         f"a {encoder.kind} model has none to extend")
    words = missing_words(encoder.vocabulary, texts)
    known = list(encoder.vocabulary.words[-FIT_WORDS:])
    vectors = teacher_vectors(teacher, known + words, cache, prefix="words", show_progress=show_progress)
    with torch.no_grad():
        first = len(encoder.vocabulary.words) - len(known) + 1
        known_rows = encoder.words.weight[first : first + len(known)].float().numpy()
    mapping = fit_map(vectors[: len(known)], known_rows)
    adapted = extended_dan(encoder, words, (vectors[len(known):] @ mapping).astype(np.float32))
    record = {"base": base, "teacher": teacher, "collection_texts": len(texts),
              "new_words": len(words), "examples": words[:20]}
    save_model(TrainedModel(adapted, model.response_head, model.nli_head,
                            {**model.metrics, "collection": record}),
               out, half_precision=True, int8_embeddings=True)
    return record
