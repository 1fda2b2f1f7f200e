"""The txtai peer's index for bench/serve.py, run by the interpreter of txtai's own virtual
environment (it imports nothing of askalike):

    PYTHON bench/txtai_peer.py MODEL_DIR TEXTS.json INDEX_DIR

embeds the texts (ids "c0", "c1", ..., as bench/serve.py's collection) with the
sentence-transformers model at MODEL_DIR and saves the index, with its content, to INDEX_DIR.
"""

import json
import sys

from txtai import Embeddings


def main() -> None:
    model, texts_file, index_dir = sys.argv[1:4]
    with open(texts_file, encoding="utf-8") as handle:
        texts = json.load(handle)
    embeddings = Embeddings(path=model, content=True)
    embeddings.index({"id": f"c{number}", "text": text} for number, text in enumerate(texts))
    embeddings.save(index_dir)


if __name__ == "__main__":
    main()
