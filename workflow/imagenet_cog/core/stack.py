"""The releases a number was computed with, as every result records them (``versions``).

``NUMBER_LIBRARIES`` are the libraries whose release can move a number of the workflow: torch's
kernels, torchvision's and timm's transforms, the image decoders, the networks timm, open_clip and
transformers build, Optuna's samplers, scikit-learn's and SciPy's metrics, faiss's k-means, the
feature files' reader, the tables' arithmetic. The tested stack pins them all
(requirements/lock-linux-x86_64.txt); a result names the releases it actually ran with, so that
two runs' numbers can be told apart by their stacks. Standard library only: package metadata, no
import of the libraries themselves.
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

import imagenet_cog

# distribution names; a library that is not installed (transformers, a faiss build) is left out
NUMBER_LIBRARIES = (
    "torch", "torchvision", "torchcodec", "timm", "open-clip-torch", "transformers", "safetensors", "optuna",
    "scikit-learn", "scipy", "numpy", "faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "h5py", "pillow", "pandas",
    "krippendorff", "gensim", "nltk",
)


def stack_versions() -> dict[str, str]:
    """The workflow's and Python's versions and each installed ``NUMBER_LIBRARIES`` release; where
    torch is imported, its build (``2.14.1+cu130``) and CUDA's release, which its metadata omits."""
    found = {"imagenet_cog": imagenet_cog.__version__, "python": platform.python_version()}
    for library in NUMBER_LIBRARIES:
        try:
            found[library] = version(library)
        except PackageNotFoundError:
            continue
    torch = sys.modules.get("torch")
    if torch is not None:
        found.update(torch=torch.__version__, cuda=torch.version.cuda or "none")
    return found
