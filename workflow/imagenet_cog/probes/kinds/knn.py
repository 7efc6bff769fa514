"""The weighted k-NN classifier of the self-supervised papers (its command is
``probe-knn``, :mod:`imagenet_cog.probes.knn_probe`): on the linear probe's shots, seeds and
final-fit images, nothing searched."""

import math

from imagenet_cog.core.naming import KNN
from imagenet_cog.probes.kinds.kind import KindTexts, OwnJob, ProbeKind, joined

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


def training_sizes(data, probes: dict) -> list[int]:
    """The training-set sizes of one dataset's k-NN job, one per distinct training set: N = all
    once (no randomness: every seed shares it), each few-shot N once per seed."""
    sizes = []
    for shots in probes["shots"]:
        if shots == "all":
            sizes.append(data.train)
        else:
            sizes += [min(int(shots) * data.classes, data.train)] * len(probes["seeds"])
    return sizes


def job_work(data, dim: int, probes: dict) -> dict[str, float]:
    """One dataset's k-NN job: a float32 similarity product of the test set with each distinct
    training set (2 D n_test n_train FLOPs), a top-k over each block of similarities and a merge
    with the running top-k per training block (2 k values per test image). The votes (k values
    per test image and k) are left out: ~1e-4 of the similarities at IN-1K's size. ``probes``:
    as validated, with probes.knn's defaults (k and train_block are read)."""
    settings = probes["knn"]
    flops = topk_values = 0.0
    for train in training_sizes(data, probes):
        flops += 2.0 * dim * data.test * train
        merges = math.ceil(train / settings["train_block"]) - 1
        topk_values += data.test * (train + merges * 2 * min(max(settings["k"]), train))
    return {"knn_flops_per_s": flops, "topk_values_per_s": topk_values}


def command_options(probes: dict) -> str:
    """probes.knn as probe-knn's options (k as the command takes it)."""
    knn = probes[KNN]
    return (f" --k {joined(knn['k'])} --reported-k {knn['reported_k']} --temperature {knn['temperature']}"
            f" --similarity {knn['similarity']} --weighting {knn['weighting']}"
            f" --test-block {knn['test_block']} --train-block {knn['train_block']}")


KIND = ProbeKind(
    name=KNN,
    title="k-NN",
    settings=("knn", "device"),
    linear_grid=True,
    priced=True,
    own_job=OwnJob(
        command="probe-knn",
        options=command_options,
        priced_by={"knn_flops_per_s": "products", "topk_values_per_s": "top-k"},
        work=job_work,
    ),
    texts=KindTexts(
        "k-NN top-1 accuracy", "k-NN top-1", f"weighted k-NN classifiers ({KNN_REPORTED_K})", "voting among",
        f"Weighted k-NN classification ({KNN_REPORTED_K})", "k-NN top-1", "every model, dataset and N of the k-NN tables",
        (KNN_NOTE,),
        named=f"the weighted k-NN ({KNN_REPORTED_K})",
        ranked_by=f"k-NN top-1 ({KNN_REPORTED_K})",
        rank_question="does the cheap k-NN rank the models as the linear probe does?",
        comparison_notes=(
            "Both probes use the same features and, per N and seed, the same training images (the linear "
            "probe's final-fit set); the linear probe's is searched for its learning rate and weight decay, "
            "the k-NN's is not.",
        ),
    ),
    settings_problem=reported_k_problem,
)
