"""RankMe (series/effective_rank.py): against a direct numpy computation, on matrices of known
rank, and the command on a small feature file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imagenet_cog.features.store import write_shard
from imagenet_cog.series.effective_rank import EPSILON, effective_rank, effective_rank_command, sampled_rows


def direct_rankme(matrix: np.ndarray, epsilon: float = EPSILON) -> float:
    """Garrido et al.'s Eq. 1 and 2, from numpy's SVD."""
    singular = np.linalg.svd(matrix.astype(np.float64), compute_uv=False)
    shares = singular / singular.sum() + epsilon
    return float(np.exp(-np.sum(shares * np.log(shares))))


@pytest.mark.parametrize("shape", [(300, 40), (40, 300), (257, 64)])
def test_effective_rank_is_the_direct_computation(shape, one_torch_thread):
    rng = np.random.default_rng(shape[0])
    # unequal column scales, so that the singular values spread
    matrix = (rng.standard_normal(shape) * rng.uniform(0.1, 3.0, size=shape[1])).astype(np.float32)
    assert effective_rank(matrix) == pytest.approx(direct_rankme(matrix), rel=1e-9)


def test_a_rank_k_matrix_scores_about_k_and_isotropic_features_about_their_width(one_torch_thread):
    rng = np.random.default_rng(0)
    rows, width, rank = 1500, 100, 8
    low_rank = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, width))
    assert rank * 0.9 < effective_rank(low_rank) < rank + 0.1
    isotropic = rng.standard_normal((rows, width))
    assert width * 0.95 < effective_rank(isotropic) <= width
    # k equal singular values: exactly k, but for the epsilon terms
    orthogonal, _ = np.linalg.qr(rng.standard_normal((rows, rank)))
    assert effective_rank(orthogonal * 7.0) == pytest.approx(rank, rel=1e-3)
    assert effective_rank(np.zeros((5, 3))) == 0.0


def test_the_sample_is_seeded_sorted_and_the_whole_split_when_smaller():
    first, again, other = sampled_rows(1000, 100, 0), sampled_rows(1000, 100, 0), sampled_rows(1000, 100, 1)
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert len(set(first)) == 100 and np.all(np.diff(first) > 0) and first.max() < 1000
    assert np.array_equal(sampled_rows(50, 100, 0), np.arange(50))


def test_the_command_reads_a_seeded_sample_of_the_valid_rows(tmp_path, one_torch_thread):
    rng = np.random.default_rng(1)
    features = rng.standard_normal((60, 8)).astype(np.float32)
    valid = np.ones(60, bool)
    valid[[3, 17]] = False
    features[~valid] = 0.0
    path = tmp_path / "train.h5"
    write_shard(path, features, np.arange(60) % 4, np.arange(60), [f"n{i % 4:08d}/{i}.JPEG" for i in range(60)], valid,
                {"model": "run@10", "dataset": "in1k", "split": "train", "feature_dim": 8})
    output = tmp_path / "rank.json"
    assert effective_rank_command(["--features", str(path), "--output", str(output), "--rows", "40", "--seed", "3",
                                   "--device", "cpu"]) == 0
    result = json.loads(output.read_text())
    chosen = features[valid][sampled_rows(58, 40, 3)]
    assert result["effective_rank"] == pytest.approx(direct_rankme(chosen), rel=1e-9)
    assert (result["model"], result["n_rows"], result["n_valid_rows"], result["max_rank"]) == ("run@10", 40, 58, 8)
    assert result["epsilon"] == EPSILON and result["sample_seed"] == 3
