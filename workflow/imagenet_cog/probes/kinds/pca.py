"""PCA + linear (CoG preprint, supp. C.2): the linear probe on the features projected onto
their first d principal components, one kind ``pca-<d>`` per d of probes.pca_dims."""

from imagenet_cog.core.naming import PCA, pca_dim, pca_kind
from imagenet_cog.probes.kinds.kind import SEARCH_SETTINGS, ProbeKind, joined

KIND = ProbeKind(
    name=PCA,
    title="PCA",
    settings=(*SEARCH_SETTINGS, "lr_range", "wd_range"),
    linear_protocol=True,
    unused_fields=("hidden_width", "hidden_layers"),
    expand=lambda probes: [pca_kind(int(dim)) for dim in probes["pca_dims"]],
    # the linear probe's ranges
    command_settings=lambda probes, name: {
        "lr_range": joined(probes["lr_range"]),
        "wd_range": joined(probes["wd_range"]),
        "kind_arguments": f"--kind {PCA} --pca-dim {pca_dim(name)}",
    },
    projected=True,
)
