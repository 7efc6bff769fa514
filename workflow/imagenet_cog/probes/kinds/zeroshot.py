"""Zero-shot classification by the concepts' names (issue #44; :mod:`imagenet_cog.probes.zeroshot`):
an image-text model's text tower turns each dataset's names table into a classifier, which
scores the dataset's test features. Nothing is fitted, so there is one result per model and
dataset, off the summary's grid of N and seeds: rules ``concept_names`` (levels.smk),
``zeroshot_classifier`` (features.smk), ``probe_zeroshot`` and ``probe_zeroshot_open_set``
(probes.smk), and the tables and figures of ``zeroshot_results`` (results.smk)."""

from imagenet_cog.core.naming import ZEROSHOT
from imagenet_cog.models.registry import has_text_tower
from imagenet_cog.probes.kinds.kind import ProbeKind

# prompts per name of open_clip's template sets (probes.zeroshot.templates), for the plan,
# which imports no open_clip (models.open_clip_text.TEMPLATE_SETS has the templates)
TEMPLATE_COUNTS = {"openai": 80, "simple": 7}


KIND = ProbeKind(
    name=ZEROSHOT,
    title="zero-shot",
    settings=("zeroshot", "device"),
    gridless=True,
    applies_to=has_text_tower,
)
