"""Principal components for PCA + linear probes, against scikit-learn's PCA (000 C.2)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA

from imagenet_cog.probes.pca import check_dim, fit_pca, read_components, write_components

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def correlated_features(count=300, dim=24, seed=0):
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(dim, dim)) * np.linspace(3.0, 0.1, dim)
    return (rng.normal(size=(count, dim)) @ mixing.T + 5.0).astype(np.float32)


@pytest.mark.parametrize("count", [300, 16])
def test_components_match_sklearn_pca(tmp_path, count):
    features = correlated_features(count=count)
    ours = fit_pca(features, chunk=50)
    reference = PCA().fit(features.astype(np.float64))
    kept = min(features.shape)
    assert ours.components.shape == (kept, features.shape[1])
    np.testing.assert_allclose(ours.explained_variance, reference.explained_variance_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ours.explained_variance_ratio, reference.explained_variance_ratio_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ours.mean, reference.mean_, rtol=1e-6)
    for dim in (1, 4, 10):
        # same subspace: the projector onto the first dim components is the same
        ours_projector = ours.components[:dim].T @ ours.components[:dim]
        reference_projector = reference.components_[:dim].T @ reference.components_[:dim]
        np.testing.assert_allclose(ours_projector, reference_projector, atol=1e-6)
        # and, with the sign convention of sklearn's svd_flip, the same projections
        np.testing.assert_allclose(ours.project(features, dim), reference.transform(features)[:, :dim], rtol=1e-4, atol=1e-3)
    path = str(tmp_path / "pca.h5")
    write_components(path, ours)
    again = read_components(path)
    np.testing.assert_array_equal(again.components, ours.components)
    assert again.n_samples == count


def test_a_d_beyond_the_components_names_the_setting():
    pca = fit_pca(correlated_features(count=16))
    check_dim(16, pca, "l1")
    with pytest.raises(ValueError, match=r"l1: probes.pca_dims asks for d=17.*16 training samples of width 24"):
        check_dim(17, pca, "l1")
    wide = fit_pca(correlated_features(count=300))
    with pytest.raises(ValueError, match=r"probes.pca_dims asks for d=32.*at most 24"):
        check_dim(32, wide, "l1")


def test_a_d_wider_than_a_models_features_stops_the_workflow_before_any_job(tmp_path):
    import yaml

    from conftest import copy_workflow, refused_overlay

    workdir = copy_workflow(tmp_path / "workflow")
    output = refused_overlay(workdir, {"probes": {"kinds": ["linear", "pca"], "pca_dims": [8, 512]}})
    model = next(iter(yaml.safe_load((workdir / "config.yaml").read_text())["models"]))
    assert "probes.pca_dims has [512]" in output and model in output
    assert not (workdir / "results").exists()
