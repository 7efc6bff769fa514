"""The model registry: how each backbone is built, cut, loaded and fed (paper Table 1, 3).

No rule file of its own: the features stage builds the models, the rule files ask the
registry for a model's weights identity and preprocessing (its jobs' parameters).

- :mod:`.registry`: registry entries, ``models:`` entries (:class:`.registry.ModelSpec`),
  weights identities, building a network, and the ``models`` command (paper Table 3).
- :mod:`.checkpoints`: reading a checkpoint tensors-only (a file holding other Python objects
  is refused unless its model trusts them), the published checkpoint layouts and the generic
  fallback, and the ``convert-checkpoint`` command.

The networks written in the project live in :mod:`imagenet_cog.backbones`.
"""
