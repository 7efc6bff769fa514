"""PCA + linear (CoG preprint, supp. C.2): the linear probe on the features projected onto
their first d principal components, one kind ``pca-<d>`` per d of probes.pca_dims."""

from imagenet_cog.core.naming import PCA, pca_dim, pca_kind
from imagenet_cog.probes.kinds.kind import SEARCH_SETTINGS, ProbeKind, joined


def too_wide_problem(probes: dict, model: str, width: int) -> str | None:
    """A d wider than a model's features cannot be had (a d above a dataset's training samples
    is known only once its splits exist: the probe job says so)."""
    too_wide = [int(dim) for dim in probes["pca_dims"] if int(dim) > width]
    if not too_wide:
        return None
    return (f"probes.pca_dims has {too_wide}, more principal components than model '{model}' has feature "
            f"dimensions ({width}); remove them from probes.pca_dims or '{PCA}' from probes.kinds.")


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
    width_problem=too_wide_problem,
)
