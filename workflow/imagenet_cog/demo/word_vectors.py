"""The demo's word vectors: a small word2vec text file of random vectors.

In demo mode without ``level_sets.word2vec.embeddings``, the word2vec level set reads this
file (``Layout.word_vectors_demo``) as it would a real export such as Wikipedia2Vec's
(:mod:`imagenet_cog.levels.word_vectors`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from imagenet_cog.core.io import atomic_output, read_tsv


def write_demo_embeddings(catalogue: Sequence[Mapping[str, str]], output: str | Path, dimension: int, seed: int) -> int:
    """Random vectors for the words of the catalogue's names and glosses, every tenth word
    (by sorted order) left out so that the coverage report has something to count."""
    words = CountVectorizer(lowercase=True).fit([row[key] for row in catalogue for key in ("name", "gloss")]).get_feature_names_out()
    kept = [word for index, word in enumerate(words) if index % 10 != 9]
    matrix = np.random.default_rng(seed).standard_normal((len(kept), dimension)).astype(np.float32)
    with atomic_output(output) as temporary:
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(f"{len(kept)} {dimension}\n")
            for word, vector in zip(kept, matrix):
                stream.write(word + " " + " ".join(f"{value:.5f}" for value in vector) + "\n")
    return len(kept)


def demo_embeddings_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog demo-embeddings",
        description="Write a small word2vec text file of random word vectors for the demo.",
    )
    parser.add_argument("--catalogue", required=True)
    parser.add_argument("--dimension", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    count = write_demo_embeddings(read_tsv(args.catalogue), args.output, args.dimension, args.seed)
    print(f"{count} word vectors of dimension {args.dimension}")
    return 0
