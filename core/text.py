"""Text normalisation, word tokenisation and the vocabulary saved with each trained model.

Word ids: 0 is padding, 1..V the vocabulary, then ``oov_buckets`` ids that unknown words hash
into. Word bigrams hash into ``bigram_buckets`` ids (1-based, 0 is padding). Hashes are CRC32 so
that they are the same in every process and Python version.
"""

from __future__ import annotations

import json
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

_TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")
PAD = 0


def join_subject_body(subject: str, body: str) -> str:
    """A question's text: its subject and body, as the CQA files and the store keep them apart."""
    return f"{subject.strip()} {body.strip()}".strip()


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def tokenize(text: str) -> list[str]:
    """Lowercased, NFKC-normalised words and punctuation marks."""
    return _TOKEN.findall(normalize(text))


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]
    oov_buckets: int = 1000
    bigram_buckets: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {word: i for i, word in enumerate(self.words, start=1)})

    @property
    def word_count(self) -> int:
        """Size of the word embedding table, padding and OOV buckets included."""
        return len(self.words) + self.oov_buckets + 1

    @property
    def bigram_count(self) -> int:
        return self.bigram_buckets + 1 if self.bigram_buckets else 0

    @classmethod
    def build(cls, texts: Iterable[str], max_size: int, min_count: int = 2,
              oov_buckets: int = 1000, bigram_buckets: int = 0) -> Vocabulary:
        """The ``max_size`` most frequent words seen at least ``min_count`` times (ties by word)."""
        counts = Counter(token for text in texts for token in tokenize(text))
        frequent = sorted((w for w, c in counts.items() if c >= min_count),
                          key=lambda w: (-counts[w], w))
        return cls(tuple(frequent[:max_size]), oov_buckets, bigram_buckets)

    def known_id(self, token: str) -> int | None:
        """The id of a vocabulary word; None for a word outside it."""
        return self._index.get(token)  # type: ignore[attr-defined]

    def knows_words(self, text: str) -> bool:
        """Is any token of ``text`` a vocabulary word? (Other words share hashed OOV buckets: a
        text of those alone has a vector that says little about it.)"""
        return any(self.known_id(token) is not None for token in tokenize(text))

    def word_id(self, token: str) -> int:
        known = self.known_id(token)
        if known is not None:
            return known
        return len(self.words) + 1 + _stable_hash(token) % self.oov_buckets

    def bigram_id(self, first: str, second: str) -> int:
        return 1 + _stable_hash(f"{first} {second}") % self.bigram_buckets

    def encode(self, texts: Sequence[str], max_length: int) -> dict[str, np.ndarray]:
        """Padded int64 id arrays: ``words`` (B, L) and, with bigram buckets, ``bigrams`` (B, L-1)."""
        tokenized = [tokenize(text)[:max_length] or ["<empty>"] for text in texts]
        width = max(len(tokens) for tokens in tokenized)
        words = np.zeros((len(texts), width), dtype=np.int64)
        for row, tokens in enumerate(tokenized):
            words[row, : len(tokens)] = [self.word_id(t) for t in tokens]
        batch = {"words": words}
        if self.bigram_buckets:
            bigrams = np.zeros((len(texts), max(width - 1, 1)), dtype=np.int64)
            for row, tokens in enumerate(tokenized):
                ids = [self.bigram_id(a, b) for a, b in pairwise(tokens)]
                if ids:
                    bigrams[row, : len(ids)] = ids
            batch["bigrams"] = bigrams
        return batch

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"oov_buckets": self.oov_buckets,
                                    "bigram_buckets": self.bigram_buckets,
                                    "words": list(self.words)}, ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        data = json.loads(path.read_text())
        return cls(tuple(data["words"]), data["oov_buckets"], data["bigram_buckets"])
