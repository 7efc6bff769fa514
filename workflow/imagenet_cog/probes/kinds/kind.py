"""What a probe kind is to the workflow: the facts the rules, the search and the result
tables ask of it, declared once in the kind's own module (:mod:`imagenet_cog.probes.kinds`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# probes.* keys every searched kind's studies depend on (its params.probes); the linear
# probe's learning-rate and weight-decay ranges are added by the kinds that use them
SEARCH_SETTINGS = ("trials", "epochs", "batch_size", "momentum", "val_fraction", "trials_per_batch", "device",
                   "precision")


@dataclass(frozen=True)
class ProbeKind:
    # its name in probes.kinds and the probe command's --kind
    name: str
    # how the result tables title its columns (CoG preprint, Tab. 3)
    title: str
    # the probes.* keys whose change must rerun its jobs (an allow-list: a key added to the
    # schema reruns nothing until a kind claims it)
    settings: tuple[str, ...]
    # on the linear probe's shots and seeds; otherwise on probes.other_kinds_shots/seeds
    linear_grid: bool = False
    # tuned by the probe command's search (the k-NN has its own command and nothing to tune)
    searched: bool = True
    # the linear protocol: L2-normalised inputs, candidates and seeds trained in shared passes
    linear_protocol: bool = False
    # a column of the probe_kinds table (each kind's top-1 relative to the linear probe's)
    in_kinds_table: bool = False
    # SearchSettings fields that do not shape its studies (left out of their names)
    unused_fields: tuple[str, ...] = ()
    # keyword arguments of its trainer (imagenet_cog.probes.mlp.train_mlps for the MLP kinds)
    trainer_options: dict = field(default_factory=dict)
    # its result folders for probes.* settings, when not just its name (pca: one per d)
    expand: Callable[[dict], list[str]] | None = None

    def result_names(self, probes: dict) -> list[str]:
        """The kind's names in result paths and the summary's ``probe`` column."""
        return self.expand(probes) if self.expand else [self.name]
