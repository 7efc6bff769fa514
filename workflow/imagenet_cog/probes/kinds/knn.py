"""The weighted k-NN classifier of the self-supervised papers (issue #33; its command is
``probe-knn``, :mod:`imagenet_cog.probes.knn_probe`): on the linear probe's shots, seeds and
final-fit images, nothing searched."""

from imagenet_cog.core.naming import KNN
from imagenet_cog.probes.kinds.kind import ProbeKind

KIND = ProbeKind(
    name=KNN,
    title="k-NN",
    settings=("knn", "device"),
    linear_grid=True,
    searched=False,
)
