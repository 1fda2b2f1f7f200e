"""Tokenizer, vocabulary, duplicate-free batching and an encoder's batches."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from askalike.core.encoder import BatchedEncoder
from askalike.core.text import Vocabulary, tokenize
from askalike.train.batching import text_key, unique_text_batches


def test_tokenize_normalises_case_and_unicode():
    assert tokenize("\uff37hat's the \uff22EST caf\u00e9?") == ["what's", "the", "best", "café", "?"]


def test_vocabulary_known_oov_and_bigrams(tmp_path):
    vocabulary = Vocabulary.build(["a b c", "a b", "a"], max_size=2, min_count=1, oov_buckets=10,
                                  bigram_buckets=50)
    assert vocabulary.words == ("a", "b")
    assert vocabulary.word_id("a") == 1
    oov = vocabulary.word_id("zebra")
    assert 3 <= oov < 3 + 10 and oov == vocabulary.word_id("zebra")
    batch = vocabulary.encode(["a b zebra", "b"], max_length=8)
    assert batch["words"].tolist() == [[1, 2, oov], [2, 0, 0]]
    assert batch["bigrams"][1].tolist() == [0, 0]
    assert 1 <= int(batch["bigrams"][0, 0]) <= 50
    vocabulary.save(tmp_path / "vocab.json")
    assert np.array_equal(Vocabulary.load(tmp_path / "vocab.json").encode(["a b zebra"], 8)["bigrams"],
                          vocabulary.encode(["a b zebra"], 8)["bigrams"])


class LengthEncoder(BatchedEncoder):
    """A text's vector is its length; every batch it is given is kept."""

    kind, dim = "length", 2

    def __init__(self, max_batch: int, max_batch_chars: int | None) -> None:
        self.max_batch, self.max_batch_chars, self.batches = max_batch, max_batch_chars, []

    def embed_batch(self, texts):
        self.batches.append(list(texts))
        return np.array([[len(text), 1.0] for text in texts], dtype=np.float32)


@given(st.lists(st.text(max_size=40), max_size=50), st.integers(1, 9), st.integers(1, 9),
       st.none() | st.integers(1, 120))
def test_an_encoders_batches_keep_to_its_text_and_character_limits(texts, batch_size, max_batch, max_chars):
    """Every text is embedded once, its vector in its place; a batch holds at most
    ``batch_size`` and ``max_batch`` texts and, with ``max_batch_chars``, at most that many
    characters padded to its longest text, unless it is one text alone."""
    encoder = LengthEncoder(max_batch, max_chars)
    vectors = encoder.encode(texts, batch_size=batch_size, normalize=False)
    assert vectors[:, 0].tolist() == [len(text) for text in texts]
    assert sorted(text for batch in encoder.batches for text in batch) == sorted(texts)
    for batch in encoder.batches:
        assert 1 <= len(batch) <= min(batch_size, max_batch)
        if max_chars is not None and len(batch) > 1:
            assert len(batch) * max(map(len, batch)) <= max_chars


@pytest.mark.parametrize("max_chars", [None, 100])
def test_a_batch_size_below_one_is_refused_with_or_without_a_character_limit(max_chars):
    encoder = LengthEncoder(8, max_chars)
    with pytest.raises(ValueError, match="batch_size must be at least 1, not 0"):
        encoder.encode(["a", "bb"], batch_size=0)
    assert encoder.batches == []


pair_lists = st.lists(st.tuples(st.sampled_from("abcdefghij"), st.sampled_from("abcdefghijk")),
                      min_size=1, max_size=60)


@given(pair_lists, st.integers(2, 8), st.integers(0, 3))
def test_batches_never_repeat_a_text_and_keep_every_usable_pair(pairs, size, seed):
    batches = unique_text_batches(pairs, size, seed)
    for batch in batches:
        texts = [text_key(t) for i in batch for t in pairs[i]]
        assert len(texts) == len(set(texts))
        assert len(batch) <= size
    placed = sorted(i for batch in batches for i in batch)
    usable = [i for i, (a, b) in enumerate(pairs) if text_key(a) != text_key(b)]
    assert placed == usable


def test_batches_are_seeded():
    pairs = [(f"q{i}", f"r{i}") for i in range(100)]
    assert unique_text_batches(pairs, 10, 1) == unique_text_batches(pairs, 10, 1)
    assert unique_text_batches(pairs, 10, 1) != unique_text_batches(pairs, 10, 2)
    assert unique_text_batches([("Same text", "same  TEXT")], 4, 0) == []


@pytest.mark.reliability("any Unicode text (hypothesis) through the tokenizer and vocabulary",
                         "tokens are non-empty, lowercase-stable and whitespace-free; re-tokenizing "
                         "is a no-op; every id is inside the vocabulary; never an exception")
@given(st.lists(st.text(), min_size=1, max_size=5))
def test_tokenizer_and_vocabulary_take_any_text(texts):
    for text in texts:
        tokens = tokenize(text)
        assert all(token and not any(c.isspace() for c in token) for token in tokens)
        assert tokenize(" ".join(tokens)) == tokens
    batch = PROPERTY_VOCABULARY.encode(texts, max_length=16)
    assert batch["words"].shape[0] == len(texts) and batch["words"].shape[1] <= 16
    assert int(batch["words"].max()) < PROPERTY_VOCABULARY.word_count
    assert bool((batch["words"][:, 0] != 0).all())  # an empty text still embeds (as <empty>)
    if batch["bigrams"].size:
        assert int(batch["bigrams"].max()) < PROPERTY_VOCABULARY.bigram_count


PROPERTY_VOCABULARY = Vocabulary.build(["the visa office", "a cheap car in doha"], max_size=50,
                                       min_count=1, oov_buckets=7, bigram_buckets=11)
