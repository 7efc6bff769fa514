"""Backbones of paper Table 1 that neither torchvision nor timm ship, written in the project.

Their module and parameter names follow the authors' published checkpoints, so that those
load as they are (see :mod:`imagenet_cog.models`, ``library: project``).
"""
