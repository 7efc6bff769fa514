"""The probe kinds, one module each: what its jobs depend on, where it runs and how the
tables name it. The rules, the search and the result tables ask :data:`KINDS`, not the
kinds' names.

- :mod:`.kind`: :class:`~.kind.ProbeKind`, the facts a kind declares.
- :mod:`.linear`, :mod:`.pca`, :mod:`.mlp`, :mod:`.mlp_noact`, :mod:`.knn`, :mod:`.zeroshot`: the kinds.
"""

from imagenet_cog.core.naming import pca_dim
from imagenet_cog.probes.kinds import knn, linear, mlp, mlp_noact, pca, zeroshot
from imagenet_cog.probes.kinds.kind import ProbeKind

# by name, in the order of the schema's probes.kinds
KINDS: dict[str, ProbeKind] = {kind.name: kind for kind in (linear.KIND, mlp.KIND, mlp_noact.KIND, pca.KIND, knn.KIND,
                                                          zeroshot.KIND)}
SEARCHED_KINDS = tuple(name for name, kind in KINDS.items() if kind.searched)
# kinds off the summary's grid of N and seeds (zero-shot), each with rules of its own
OFF_GRID_KINDS = tuple(name for name, kind in KINDS.items() if kind.off_grid)
# probes.* keys that choose which jobs run and how they are shaped (pca_dims: which pca-<d>
# kinds; kind_models: for which models), or reach a command as an option only when set (fused,
# two_stage): in no kind's params
JOB_SETTINGS = ("seeds", "shots", "kinds", "pca_dims", "other_kinds_shots", "other_kinds_seeds", "kind_models", "group",
                "seeds_together", "fused", "two_stage")


def kind_of_result(name: str) -> ProbeKind:
    """The kind of a result name: ``pca-256`` -> the pca kind, ``mlp`` -> mlp."""
    return KINDS[pca.KIND.name if pca_dim(name) is not None else name]
