"""Probes stage (``workflow/rules/probes.smk``; CoG (ICCV 2021) Sec. 3.4.3, supp. B.2;
the MLP and PCA kinds: the CoG preprint, arXiv v1 2020, supp. C.2, C.3; the k-NN kind: the
weighted k-NN evaluation of the self-supervised papers, Wu et al. 2018, DINO).

- :mod:`.probe`: the ``probe`` command, one job from its feature files to its result JSONs.
- :mod:`.search`: the protocol of a job: validation split, few-shot samples, the Optuna
  search, the final fit and the result fields (several seeds of one dataset and N at once).
- :mod:`.linear`: linear probes trained with SGD (closed-form gradient, stacked candidates).
- :mod:`.mlp`: the MLP probe kinds.
- :mod:`.knn`: the weighted k-nearest-neighbour classifier (the ``knn`` kind), blocked top-k.
- :mod:`.knn_probe`: the ``probe-knn`` command, every N and seed of one model and dataset.
- :mod:`.pca`: principal components for the ``pca-<d>`` kinds (``pca-components``).
- :mod:`.classifier`: the final N = all classifier kept beside a result, and its refit.
"""
