"""Backbones of paper Table 1 that neither torchvision nor timm ship, written in the project.

Their module and parameter names follow the authors' published checkpoints, so that those
load as they are (see :mod:`imagenet_cog.models.registry`, ``library: project``).

A model built from one of these files carries the file's digest and its module's name in
its weights identity (:func:`imagenet_cog.models.registry.weights_identity`): editing a
file re-extracts the features of the models built from it, and so would moving it. That is
why this package of the models' code stays at ``imagenet_cog.backbones``, beside
:mod:`imagenet_cog.models`: change a file here only when its network changes.
"""
