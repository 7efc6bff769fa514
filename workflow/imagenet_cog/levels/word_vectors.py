"""word2vec similarity of concepts to IN-1K (paper supp. D.1, Eq. 3).

tf-idf weights are learnt (scikit-learn's TfidfVectorizer) over the names and the glosses of
every concept of the catalogue, each name and each gloss one document. A concept's vector is
the tf-idf-weighted mean of the vectors of its name's words plus that of its gloss's words,
words without a vector left out; its similarity to IN-1K is the highest cosine similarity to
an IN-1K concept's vector (the nearest: the smallest wnid among ties). A concept with no
word vector at all ranks last (similarity -1).

The word vectors are a file the user supplies in word2vec's text or binary format (e.g.
Wikipedia2Vec's word2vec-format export), read with gensim's KeyedVectors; the demo writes a
small one of random vectors (:mod:`imagenet_cog.demo.word_vectors`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.levels.similarity import NearestReference

SETTING = "level_sets.word2vec.embeddings"
# A file that covers fewer concepts than this cannot rank them meaningfully.
MIN_CONCEPT_COVERAGE = 0.5


class WordVectorError(ExplainedError, ValueError):
    """The word vectors cannot be used as configured."""


def load_word_vectors(path: str | Path | None, binary: bool):
    # gensim and scikit-learn only for the word2vec set: level-set imports this module for every measure
    from gensim.models import KeyedVectors

    if not path:
        raise WordVectorError(f"{SETTING} is not set; point it at a word2vec-format file of word vectors.")
    path = Path(path)
    if not path.is_file():
        raise WordVectorError(f"{SETTING} = {str(path)!r} does not exist; fix the path.")
    try:
        return KeyedVectors.load_word2vec_format(str(path), binary=binary, unicode_errors="ignore")
    except (ValueError, UnicodeDecodeError, EOFError, IndexError) as error:
        kind = "binary" if binary else "text"
        raise WordVectorError(
            f"{SETTING} = {str(path)!r} is not a word2vec {kind} file ({error}); export the vectors in "
            f"word2vec format, or set level_sets.word2vec.binary to {str(not binary).lower()}."
        ) from None


def concept_vectors(vectors, catalogue: Sequence[Mapping[str, str]], wnids: Sequence[str]):
    """Vectors of ``wnids`` (zero rows for concepts without any word vector) and a coverage report."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    names = [row["name"] for row in catalogue]
    glosses = [row["gloss"] for row in catalogue]
    vectorizer = TfidfVectorizer(lowercase=True)
    vectorizer.fit([*names, *glosses])
    vocabulary = vectorizer.get_feature_names_out()
    present = np.array([word in vectors.key_to_index for word in vocabulary])
    embedding = np.zeros((len(vocabulary), vectors.vector_size), dtype=np.float64)
    if present.any():
        embedding[present] = vectors[[w for w, p in zip(vocabulary, present) if p]]
    row_of = {row["wnid"]: index for index, row in enumerate(catalogue)}
    rows = [row_of[w] for w in wnids]
    total = np.zeros((len(wnids), vectors.vector_size))
    covered = np.zeros(len(wnids), dtype=bool)
    for texts in (names, glosses):
        weights = vectorizer.transform([texts[r] for r in rows])
        weighted = np.asarray(weights @ embedding)
        weight_sum = np.asarray(weights @ present.astype(np.float64)).ravel()
        has = weight_sum > 0
        total[has] += weighted[has] / weight_sum[has, None]
        covered |= has
    used = np.asarray(vectorizer.transform([t for r in rows for t in (names[r], glosses[r])]).sum(axis=0)).ravel() > 0
    report = {
        "words": int(used.sum()),
        "words_without_vector": int((used & ~present).sum()),
        "concepts": len(wnids),
        "concepts_without_vector": int((~covered).sum()),
    }
    return total, covered, report


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1; zero rows (no word vector) stay zero."""
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-300)


def max_cosine_similarity(
    path: str | Path | None, binary: bool, catalogue: Sequence[Mapping[str, str]],
    concepts: Sequence[str], references: Sequence[str],
) -> tuple[NearestReference, str]:
    vectors = load_word_vectors(path, binary)
    references = sorted(references)
    concept_matrix, concept_covered, concept_report = concept_vectors(vectors, catalogue, concepts)
    reference_matrix, reference_covered, reference_report = concept_vectors(vectors, catalogue, references)
    for label, report in (("concepts to rank", concept_report), ("IN-1K concepts", reference_report)):
        if report["concepts_without_vector"] > (1 - MIN_CONCEPT_COVERAGE) * report["concepts"]:
            raise WordVectorError(
                f"{SETTING} = {str(path)!r} has no vector for any word of {report['concepts_without_vector']} of "
                f"the {report['concepts']} {label}; it is not a file of English word vectors (lower-case words)."
            )
    cosine = unit_rows(concept_matrix) @ unit_rows(reference_matrix).T
    cosine[:, ~reference_covered] = -1.0
    best = np.argmax(cosine, axis=1)
    similarity = np.where(concept_covered, cosine[np.arange(len(concepts)), best], -1.0)
    text = (
        f"word vectors: {len(vectors.key_to_index)} keys of dimension {vectors.vector_size}; "
        f"{concept_report['words_without_vector']} of {concept_report['words']} words of the concepts' names and "
        f"glosses have no vector; {concept_report['concepts_without_vector']} of {concept_report['concepts']} concepts "
        f"and {reference_report['concepts_without_vector']} of {reference_report['concepts']} IN-1K concepts have none"
    )
    return NearestReference(similarity, [references[i] for i in best.tolist()]), text
