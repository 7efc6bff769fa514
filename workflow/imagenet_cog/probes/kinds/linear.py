"""The linear probe: logistic regression on L2-normalised features (CoG (ICCV 2021) Sec. 3.4.3),
the reference every other kind is compared with."""

from imagenet_cog.core.naming import LINEAR
from imagenet_cog.probes.kinds.kind import SEARCH_SETTINGS, KindTexts, ProbeKind

KIND = ProbeKind(
    name=LINEAR,
    title="LogReg",
    settings=(*SEARCH_SETTINGS, "lr_range", "wd_range"),
    linear_grid=True,
    priced=True,
    linear_protocol=True,
    unused_fields=("kind", "hidden_width", "hidden_layers", "pca_dim"),
    texts=KindTexts(
        "Top-1 accuracy", "top-1", "linear classifiers", "trained on", "Linear classification", "Top-1",
        "every model, dataset and N of the run",
    ),
)
