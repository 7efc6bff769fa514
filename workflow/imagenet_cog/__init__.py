"""ImageNet-CoG: the concept generalization benchmark as an importable library.

Every Snakemake rule of the workflow is a thin call into one of this package's modules
through ``python -m imagenet_cog <command>``; see ``imagenet_cog.cli``.
"""

__version__ = "0.1.0"
