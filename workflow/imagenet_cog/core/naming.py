"""Dataset and probe-kind names: formed, parsed and matched here only.

Datasets (each a folder name under ``results/splits``, ``features``, ``probes``):

- ``in1k``: IN-1K's probed concepts; ``in1k_blurred``: its face-blurred release (supp. E);
- ``l1`` .. ``lN``: Lin's levels (:func:`level_name`); in a ranking, the ranks between two
  levels are ``gap1`` .. (:func:`gap_name`);
- ``pool``: the eligible concepts outside Lin's levels, extracted for the level sets;
- ``<set>-l<k>``: level k of a ranked level set (``wup-l3``; :data:`RANKED_LEVEL_SETS`);
- ``random-NN``: random draw NN, from 01 (:func:`random_dataset`);
- ``balanced-<dataset>``: the class-balanced variant of IN-1K or a level (supp. A.4).

Probe kinds: ``linear``, ``knn``, ``mlp``, ``mlp_noact``, ``pca-<d>`` (:func:`pca_kind`) and
``zeroshot``, whose open-set classifier covers every dataset at once (``open-set``).

The ``*_PATTERN`` and ``*_DATASET`` regular expressions are the rule files' wildcard
constraints (``workflow/rules/common/grid.smk``), built from the same names.
"""

from __future__ import annotations

import re

IN1K = "in1k"
# the image root of ImageNet-21K: the levels' and the pool's images (no dataset of that name)
IN21K = "in21k"
IN1K_BLURRED = "in1k_blurred"
POOL = "pool"
# the level set of IN-1K and Lin's levels
LIN = "lin"
# WordNet similarities besides Lin's (imagenet_cog.levels.similarity computes them all)
WORDNET_MEASURES = ("wup", "path", "jcn", "res")
# level sets that rank concepts and cut them into levels; "random" draws them instead
RANKED_LEVEL_SETS = (*WORDNET_MEASURES, "word2vec")
RANDOM = "random"
LEVEL_SETS = (*RANKED_LEVEL_SETS, RANDOM)
# how figures and tables name each set
MEASURE_TITLES = {"lin": "Lin", "wup": "Wu-Palmer", "path": "path", "jcn": "Jiang-Conrath", "res": "Resnik",
                  "word2vec": "word2vec", "random": "random"}
BALANCED_PREFIX = "balanced-"
LINEAR = "linear"
# the weighted k-NN classifier: on the linear probe's grid, its own result tables
KNN = "knn"
# zero-shot classification by the concepts' names (image-text models): one result per model and
# dataset; OPEN_SET names the classifier of every dataset's concepts together
ZEROSHOT = "zeroshot"
OPEN_SET = "open-set"
MLP = "mlp"
MLP_NOACT = "mlp_noact"
MLP_KINDS = (MLP, MLP_NOACT)
# the linear probe on d principal components: pca in probes.kinds, one kind pca-<d> per d
PCA = "pca"
PCA_PREFIX = f"{PCA}-"


def own_job_rule(kind: str) -> str:
    """The rule of a kind with jobs of its own (``probe_knn``), one job per model and dataset;
    its benchmark files are ``<kind>.tsv``."""
    return f"probe_{kind}"


LEVEL_PATTERN = r"l[1-9][0-9]*"
DRAW_PATTERN = r"[0-9]{2}"
LEVEL_SET_PATTERN = "|".join(RANKED_LEVEL_SETS)
# IN-1K and Lin's levels: the datasets of config.yaml's `datasets`
DEFAULT_DATASET = rf"{IN1K}|{LEVEL_PATTERN}"
# datasets whose images are read and whose features are extracted
EXTRACTED_DATASET = rf"{IN1K_BLURRED}|{IN1K}|{LEVEL_PATTERN}|{POOL}"
# level-set datasets: views over the features of Lin's levels and the pool
VIEW_DATASET = rf"(?:{LEVEL_SET_PATTERN})-{LEVEL_PATTERN}|{RANDOM}-{DRAW_PATTERN}"
# the class-balanced variant: views over a default dataset's features
BALANCED_DATASET = rf"{BALANCED_PREFIX}(?:{DEFAULT_DATASET})"
# probe kinds besides linear, which has no folder of its own
KIND_PATTERN = rf"{'|'.join(MLP_KINDS)}|{PCA_PREFIX}[1-9][0-9]*"
SHOTS_PATTERN = r"[1-9][0-9]*|all"
SEED_PATTERN = r"[0-9]+"
SPLIT_PATTERN = r"train|test"
# what a zero-shot classifier names: one default dataset's concepts, or all of them
NAMED_CONCEPTS_PATTERN = rf"{DEFAULT_DATASET}|{OPEN_SET}"
SHARD_PATTERN = r"[0-9]{5}"


def level_name(k: int) -> str:
    """Lin's level k (from 1): ``l3``."""
    return f"l{k}"


def level_names(count: int) -> list[str]:
    return [level_name(k) for k in range(1, count + 1)]


def gap_name(k: int) -> str:
    """The ranks between levels k and k + 1 of a ranking: ``gap2``."""
    return f"gap{k}"


def level_number(level: str) -> int:
    """k of level ``lk``."""
    return int(level[1:])


def is_level(name: str) -> bool:
    """Whether ``name`` is a level (``l3``), not a gap, IN-1K or a level set's dataset."""
    return re.fullmatch(LEVEL_PATTERN, name) is not None


def draw_id(draw: int) -> str:
    """Random draw ``draw`` (from 1) as its two digits: ``07``."""
    return f"{draw:02d}"


def random_dataset(draw: str) -> str:
    """The dataset of a random draw given as its two digits: ``random-07``."""
    return f"{RANDOM}-{draw}"


def level_set_dataset(level_set: str, level: str) -> str:
    """Level ``level`` of a ranked level set: ``wup-l3``."""
    return f"{level_set}-{level}"


def level_set_of(dataset: str) -> str:
    """The level set a dataset belongs to: ``wup-l3`` -> wup, ``random-07`` -> random, and
    lin for IN-1K, Lin's levels and every dataset without a set prefix."""
    return dataset.split("-", 1)[0] if "-" in dataset else LIN


def view_parts(dataset: str) -> tuple[str, str]:
    """(set, level) of ``<set>-l<k>``, or (random, NN) of ``random-NN``."""
    level_set, rest = dataset.split("-", 1)
    return level_set, rest


def balanced_dataset(dataset: str) -> str:
    """The class-balanced variant of a default dataset: ``balanced-l3``."""
    return f"{BALANCED_PREFIX}{dataset}"


def balanced_source(dataset: str) -> str:
    """The default dataset behind a balanced one (``balanced-l3`` -> l3); others unchanged."""
    return dataset.removeprefix(BALANCED_PREFIX)


def pca_kind(dim: int) -> str:
    """The probe kind of the linear probe on d principal components: ``pca-256``."""
    return f"{PCA_PREFIX}{dim}"


def pca_dim(kind: str) -> int | None:
    """d of a ``pca-<d>`` kind; None for the other kinds."""
    return int(kind.split("-", 1)[1]) if kind.startswith(PCA_PREFIX) else None


def dataset_title(dataset: str) -> str:
    """The paper's names: IN-1K, IN-1K-b, L1, L2, ..."""
    return {IN1K: "IN-1K", IN1K_BLURRED: "IN-1K-b"}.get(dataset, dataset.upper())


def shots_title(shots: str) -> str:
    return "All" if shots == "all" else f"N={shots}"
