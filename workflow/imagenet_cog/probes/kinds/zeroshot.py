"""Zero-shot classification by the concepts' names (:mod:`imagenet_cog.probes.zeroshot`):
an image-text model's text tower turns each dataset's names table into a classifier, which
scores the dataset's test features. Nothing is fitted, so there is one result per model and
dataset, off the summary's grid of N and seeds: its rules (``concept_names``,
``zeroshot_classifier``, ``probe_zeroshot``, ``probe_zeroshot_open_set``, ``zeroshot_results``)
are in workflow/rules/kinds/zeroshot.smk."""

from imagenet_cog.core.naming import OPEN_SET, ZEROSHOT
from imagenet_cog.models.registry import has_text_tower
from imagenet_cog.probes.kinds.kind import OffGrid, PricedJob, ProbeKind

# prompts per name of open_clip's template sets (probes.zeroshot.templates), for the plan,
# which imports no open_clip (models.open_clip_text.TEMPLATE_SETS has the templates)
TEMPLATE_COUNTS = {"openai": 80, "simple": 7}
# what starts a job that builds the model (the classifier's) and one that only reads features
MODEL_JOB_START = {"job_start_s": 1, "cuda_start_s": 1, "model_build_s": 1, "checkpoint_load_s": 1}
JOB_START = {"job_start_s": 1, "cuda_start_s": 1}


def named_sets(datasets: list[str], settings: dict) -> list[str]:
    """What a model's classifiers name: each dataset, and all of them together (the open set)
    when probes.zeroshot.open_set asks and there are several."""
    return datasets + ([OPEN_SET] if settings["open_set"] and len(datasets) > 1 else [])


def priced_jobs(datasets: list, dim: int, value_bytes: int, probes: dict) -> list[PricedJob]:
    """One model's jobs: per named set a classifier job (every name in every template through
    the text tower) and a scoring job (its test features read and prepared, their product with
    the classifier: 2 D images x concepts FLOPs)."""
    settings = probes[ZEROSHOT]
    sized = {data.name: (data.classes, data.test) for data in datasets}
    sized[OPEN_SET] = (sum(data.classes for data in datasets), sum(data.test for data in datasets))
    jobs = []
    for named in named_sets([data.name for data in datasets], settings):
        classes, test = sized[named]
        read = test * dim * value_bytes
        jobs += [
            PricedJob({"text_prompts_per_s": classes * TEMPLATE_COUNTS[settings["templates"]], **MODEL_JOB_START},
                      written_bytes=classes * dim * 4),
            PricedJob({"read_bytes_per_s": read, "prepare_bytes_per_s": read,
                       "scoring_flops_per_s": 2.0 * dim * test * classes, **JOB_START}, results=1),
        ]
    return jobs


KIND = ProbeKind(
    name=ZEROSHOT,
    title="zero-shot",
    settings=("zeroshot", "device"),
    off_grid=OffGrid(
        rules="kinds/zeroshot.smk",
        applies_to=has_text_tower,
        rates=("text_prompts_per_s",),
        jobs=priced_jobs,
    ),
)
