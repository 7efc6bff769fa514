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
class KindTexts:
    """How the tables and figures of a probe kind with a set of its own name what they show."""

    top1: str  # at the start of a caption
    score: str  # within a sentence
    classifiers: str
    fitted_on: str  # what the classifiers do with the training images
    title: str  # the levels figure's title, before "with all training images"
    axis: str  # the relative figures' axis, before "relative to <baseline>"
    tests: str  # the family the paired tests are Holm-corrected over
    notes: tuple[str, ...] = ()
    # a kind besides linear, compared with it (tables <kind>_vs_linear, <kind>_rank_agreement):
    named: str = ""  # the kind within a sentence, its settings named ("the weighted k-NN (k = ..)")
    ranked_by: str = ""  # what it ranks the models by ("k-NN top-1 (k = ..)")
    rank_question: str = ""  # what its rank agreement with the linear probe's answers
    comparison_notes: tuple[str, ...] = ()  # how its results differ from the linear probe's in kind


def joined(values) -> str:
    """A list setting as the probe command takes it: ``0.1 100``."""
    return " ".join(str(value) for value in values)


def mlp_command_settings(mlp: dict, name: str, lr_range: str) -> dict[str, str]:
    """The MLP kinds' command settings from probes.mlp, with learning rates from its ``lr_range`` key."""
    return {
        "lr_range": joined(mlp[lr_range]),
        "wd_range": joined(mlp["wd_range"]),
        "kind_arguments": f"--kind {name} --hidden-width {mlp['hidden_width']} --hidden-layers {mlp['hidden_layers']}",
    }


def mlp_work_factor(dim: int, classes: int, probes: dict) -> float:
    """An MLP's products per sample (forward and backward, about 3x its weights) against the
    linear probe's (2 D C)."""
    width, layers = probes["mlp"]["hidden_width"], probes["mlp"]["hidden_layers"]
    weights = dim * width + (layers - 1) * width * width + width * classes
    return 3 * weights / (2 * dim * classes)


@dataclass(frozen=True)
class OwnJob:
    """A kind scored by a command of its own rather than the probe command's search: one job
    per model and dataset of IN-1K and the levels scores every N and seed of the linear probe's
    grid (rule probe_<kind>, made for each such kind in workflow/rules/probes.smk), and the
    plan prices its jobs in a row of their own (imagenet_cog.plan.cost)."""

    # the imagenet_cog command its jobs run (cli.py), which takes the options every own job
    # passes (--train, --test, --output, --model, --dataset, --shots, --seed, --device, --threads)
    command: str
    # probes.* settings -> the options of the kind's own settings, as the command reads them: the
    # rule's params.options, so that a change reruns its jobs and nothing else
    options: Callable[[dict], str]
    # rate key -> the plan's name for the seconds that rate prices (stage "<kind> <name>"); the
    # plan adds the job's loading and start at the rates every file has
    priced_by: dict[str, str]
    # (dataset sizes: plan.cost.Dataset, feature width, probes.* settings) -> rate key -> the
    # work of the kind's job on that dataset which the rate prices
    work: Callable[..., dict[str, float]]


@dataclass(frozen=True)
class PricedJob:
    """One job of a kind off the grid as the plan prices it: rate key -> the work that rate
    prices (a ``*_per_s`` rate divides it, a ``*_s`` rate multiplies a count of it; a rate
    measured per architecture is read for the model's), and what it writes."""

    work: dict[str, float]
    written_bytes: float = 0.0
    results: int = 0  # result JSONs, which the plan sizes as every probe's


@dataclass(frozen=True)
class OffGrid:
    """A kind off the summary's grid of N and seeds (zero-shot): nothing fitted, one result per
    model it applies to and each set of concepts it names. Its rules, their input functions
    and its targets are in one rule file, which probes.smk includes; the plan prices its jobs
    in a row of their own, titled by the kind."""

    # its rule file, relative to workflow/rules/
    rules: str
    # (model's config entry) -> whether its jobs run for that model
    applies_to: Callable[[dict], bool]
    # the rates that price it beyond those every file has (a file may lack them: the plan then
    # names the kind unpriced)
    rates: tuple[str, ...]
    # (the datasets' sizes: plan.cost.Dataset, feature width, bytes per feature value, probes.*
    # settings) -> every job of one model
    jobs: Callable[..., list[PricedJob]]


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
    # for the kinds of rule probe_kind: (probes.* settings, result name) -> its learning-rate and
    # weight-decay ranges and its --kind options, as the probe command reads them
    command_settings: Callable[[dict, str], dict[str, str]] | None = None
    # reads the principal components of its dataset's training features (rule pca_components)
    projected: bool = False
    # the plan's cost model counts its work (imagenet_cog.plan.cost: the linear probe's
    # training passes, the k-NN's products); the plan names the other kinds unpriced
    priced: bool = False
    # scored by a command of its own, one job per model and dataset (the k-NN); None: the
    # probe command's search
    own_job: OwnJob | None = None
    # (feature width, classes, probes.* settings) -> its training work per sample against the
    # linear probe's, which scales its jobs' wall-clock limit; None: the linear probe's work
    work_factor: Callable[[int, int, dict], float] | None = None
    # the wording of its own set of the paper's tables and figures (results/tables.py,
    # results/figures.py); None: no such set
    texts: KindTexts | None = None
    # probes.* settings -> what is wrong with them that the schema cannot say (a message naming
    # the keys and the fix), or None; the workflow checks every configured kind before any job
    settings_problem: Callable[[dict], str | None] | None = None
    # (probes.* settings, model, its feature width) -> what its settings cannot do with that
    # model's features (a message naming the keys and the fix), or None; checked likewise
    width_problem: Callable[[dict, str, int], str | None] | None = None

    # off the summary's grid of N and seeds (zero-shot): its rules, models and price; None: on it
    off_grid: OffGrid | None = None

    @property
    def searched(self) -> bool:
        """Tuned by the probe command's search (a kind with a job of its own has nothing to tune)."""
        return self.own_job is None and self.off_grid is None

    @property
    def own_rates(self) -> tuple[str, ...]:
        """The rates that price it beyond those every rates file has (a file may lack them:
        the plan then names the kind unpriced)."""
        return tuple(self.own_job.priced_by) if self.own_job else ()

    def result_names(self, probes: dict) -> list[str]:
        """The kind's names in result paths and the summary's ``probe`` column."""
        return self.expand(probes) if self.expand else [self.name]
