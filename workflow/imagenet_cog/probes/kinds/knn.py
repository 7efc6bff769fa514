"""The weighted k-NN classifier of the self-supervised papers (issue #33; its command is
``probe-knn``, :mod:`imagenet_cog.probes.knn_probe`): on the linear probe's shots, seeds and
final-fit images, nothing searched."""

from imagenet_cog.core.naming import KNN
from imagenet_cog.probes.kinds.kind import KindTexts, ProbeKind

KNN_REPORTED_K = "k = probes.knn.reported_k"
KNN_NOTE = (
    f"k-NN: weighted vote of the k nearest training images, top-1 at {KNN_REPORTED_K} (each result JSON "
    "holds every k of probes.knn.k). At N = all the k-NN has no randomness: every seed gives the same "
    "top-1 (std 0, a zero-width interval, no paired test)."
)



def reported_k_problem(probes: dict) -> str | None:
    """The tables report one k's top-1, which the job must have scored."""
    knn = probes["knn"]
    if knn["reported_k"] in knn["k"]:
        return None
    return (f"probes.knn.reported_k {knn['reported_k']} is not one of probes.knn.k {knn['k']}; the tables show the "
            "reported k's top-1: add it to k or pick one of them.")


KIND = ProbeKind(
    name=KNN,
    title="k-NN",
    settings=("knn", "device"),
    linear_grid=True,
    priced=True,
    own_rates=("knn_flops_per_s", "topk_values_per_s"),
    searched=False,
    texts=KindTexts(
        "k-NN top-1 accuracy", "k-NN top-1", f"weighted k-NN classifiers ({KNN_REPORTED_K})", "voting among",
        f"Weighted k-NN classification ({KNN_REPORTED_K})", "k-NN top-1", "every model, dataset and N of the k-NN tables",
        (KNN_NOTE,),
    ),
    settings_problem=reported_k_problem,
)
