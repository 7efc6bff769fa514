"""Tuned probes: Optuna search on a validation split, then one final fit (Sec. 3.4.3).

The protocol of one probe job (the ``probe`` command, :mod:`imagenet_cog.probes.probe`,
reads its files and writes its results). For one (model, dataset, shots, seed):

1. Validation split: ``int(val_fraction * n_c)`` training samples of each class c, drawn
   with the seed, form the validation set; the rest (the "80% part") is the search's
   training set. The test set is not read until the search is over.
2. Few-shot (``shots`` = N): N samples per class drawn with the seed from the 80% part;
   the validation set stays full size.
3. Search: Optuna's multivariate TPE sampler proposes ``trials`` (lr, weight decay) pairs,
   log-uniform in ``lr_range`` / ``wd_range``, trial k from the complete trials 0..k-1 with a
   sampler seeded by the run seed and k; each is trained with draws seeded by the run seed and
   k and scored by the top-1 on the validation set after the last epoch.
4. Final fit: a probe trained with the best pair on the full training set (for N shots,
   N per class drawn afresh with the seed from the full training set, as the authors'
   scripts do) and scored once on the test set (top-1 and top-5, percent).

Several seeds of one dataset and N can run in one job (``--seed`` with several values,
``probes.group: shots``): the features are read once, each round of the search trains the
next candidates of every seed's study in one pass, and the final fits share one pass. Each
seed keeps its own selections, study, journal, random draws and result, so its result is
the one its own job gives (the batched products may change the last bits of a weight).
Every N of a dataset can run in one job too (``--shots`` with several values, the resident
job of ``probes.group: dataset``): the features are read and prepared on the device once
and the N run one after another, each N's seeds together, each N's results written as soon
as they are done.

The study lives in an Optuna journal file next to the result. It is not a rule output,
so it survives a failed or killed job, and a re-run resumes it: trials left running by a
killed job are marked failed, and only the complete trials still missing are run. As every
proposal and random draw of trial k is a function of the seed and the trials before it, a
resumed job ends with the result (and trials) of a job never killed, timings aside. The
study's name is a hash of everything that defines its trials (the training features and
labels, the split, the SGD and search settings), so changing any of them starts a new
study in the same journal instead of mixing incompatible trials.

Result JSON (``Layout.probe_result``), one object:
    model, dataset, probe (the kind: linear, mlp, mlp_noact, pca-<d>; absent in results written
    before other kinds existed, which are linear), shots ("all" or an int), seed
    best_params {lr, weight_decay}, val_top1, test_top1, test_top5 (percent)
    n_trials, trials [{number, lr, weight_decay, val_top1, diverged}] (the scored trials; number:
              the position among them)
    n_train (samples of the final fit), n_test, n_classes, feature_dim (d for pca-<d>), random_weights
    settings {epochs, batch_size, momentum, lr_range, wd_range, val_fraction,
              trials_per_batch, precision (as configured); MLP kinds also kind,
              hidden_width, hidden_layers; pca also kind, pca_dim}, study {journal, name, resumed_trials}
    timings {search_s, final_s, total_s} (of the whole job when seeds shared it; of this N's
              part of it in a resident job),
    seeds_together (the seeds of the job, this one included; absent in older results),
    resident_job {shots, seeds, load_s} (a job that ran several N: all it ran, and the seconds
                 of reading and preparing the features they shared; absent otherwise),
    probe_step (fused, unfused, or why the fused step was unavailable; absent in older results),
    protocol_deviations [{name, ...}] and finalists (the trials of the second stage): only in
                 results of an opt-in deviation from the paper's protocol (probes.two_stage)
    versions (the releases of ``core.stack``),
    device, matmul_precision (float32, tf32 or bfloat16: the operands the probes multiplied)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import time
import warnings
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import optuna
import torch
from optuna.distributions import FloatDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from imagenet_cog.core.device import float32_matmul_precision, resolve_device
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.naming import LINEAR, PCA, pca_kind
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.probes.fused_step import resolve_fused, step_description
from imagenet_cog.probes.kinds import KINDS, SEARCHED_KINDS
from imagenet_cog.probes.linear import (
    SGDSchedule,
    feature_dtype,
    l2_normalise,
    resolve_precision,
    train_probe_runs,
    train_probes,
)
from imagenet_cog.probes.mlp import train_mlps

log = logging.getLogger("imagenet_cog.probes.search")

VALIDATION_STREAM, SEARCH_SHOTS_STREAM, FINAL_SHOTS_STREAM, FINAL_FIT_STREAM, PROPOSAL_STREAM = range(5)


class DamagedJournalError(ExplainedError, ValueError):
    """A study's journal Optuna cannot read."""


class ProbeDataError(ExplainedError, ValueError):
    """The features cannot support the requested probe (too few samples, unknown classes)."""


@dataclass(frozen=True)
class SearchSettings:
    trials: int = 30
    epochs: int = 100
    batch_size: int = 1024
    momentum: float = 0.9
    lr_range: tuple[float, float] = (0.1, 100.0)
    wd_range: tuple[float, float] = (1e-12, 1e-4)
    val_fraction: float = 0.2
    trials_per_batch: int = 1
    precision: str = "auto"
    # the probe's kind (SEARCHED_KINDS) and, for the MLP kinds, its hidden layers
    kind: str = LINEAR
    hidden_width: int = 2048
    hidden_layers: int = 2
    # the pca kind: principal components the features were projected onto
    pca_dim: int = 0
    # the fused step (imagenet_cog.probes.fused_step: auto, on, off): the same probes to float
    # tolerance, so not a defining setting (its studies are shared with the reference step's)
    fused: str = "auto"
    # a protocol deviation, opt-in (probes.two_stage): (short epochs, finalists), see TWO_STAGE
    two_stage: tuple[int, int] | None = None

    def defining(self) -> dict:
        """The settings that shape the probe; the linear probe's are those it had before
        other kinds existed, so its study names and result JSONs stay as they were."""
        fields = asdict(self)
        fields.pop("fused")
        if self.two_stage is None:  # the paper's protocol: study names as before deviations existed
            fields.pop("two_stage")
        for key in KINDS[self.kind].unused_fields:
            fields.pop(key)
        return fields

    @property
    def probe_name(self) -> str:
        """The kind as result paths and the summary name it: linear, mlp, mlp_noact, pca-<d>."""
        return pca_kind(self.pca_dim) if self.kind == PCA else self.kind

    @property
    def deviations(self) -> list[dict]:
        """The protocol deviations these settings make, as results name them (none: the paper's)."""
        if self.two_stage is None:
            return []
        return [{"name": "two_stage", "short_epochs": self.two_stage[0], "finalists": self.two_stage[1]}]

    @property
    def normalised_inputs(self) -> bool:
        """The linear protocol L2-normalises its inputs (also projected ones); MLPs do not (CoG preprint, supp. C.3)."""
        return KINDS[self.kind].linear_protocol


# data selection -------------------------------------------------------------------------


def _stream(seed: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng([seed, purpose])


def validation_split(labels: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, validation): ``int(val_fraction * n_c)`` of each class c validate."""
    rng = _stream(seed, VALIDATION_STREAM)
    train, validation = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        held_out = int(val_fraction * members.size)
        validation.append(members[:held_out])
        train.append(members[held_out:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(validation))


def few_shot_subset(
    labels: np.ndarray, candidates: np.ndarray, shots: int, seed: int, stream: int, where: str
) -> np.ndarray:
    """``shots`` indices of each class among ``candidates``, drawn with the seed.

    ``where`` names the data in the error raised when a class has fewer samples.
    """
    rng = _stream(seed, stream)
    chosen = []
    for label in np.unique(labels):
        members = candidates[labels[candidates] == label]
        if members.size < shots:
            raise ProbeDataError(
                f"{where}: class {label} has {members.size} samples, fewer than shots={shots} "
                f"(classes are the split table's labels); remove {shots} from probes.shots in "
                f"config.yaml, or give this class more images."
            )
        chosen.append(rng.choice(members, size=shots, replace=False))
    return np.sort(np.concatenate(chosen))


def run_selections(
    train_labels: np.ndarray, shots: str, seed: int, val_fraction: float, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices (search, validation, final fit) of one run into its training set."""
    search_part, validation_part = validation_split(train_labels, val_fraction, seed)
    if validation_part.size == 0:
        raise ProbeDataError(
            f"{where}: val_fraction={val_fraction} leaves no validation sample in any class "
            f"(at most {np.unique(train_labels, return_counts=True)[1].max(initial=0)} per class); "
            f"raise probes.val_fraction."
        )
    final_part = np.arange(train_labels.size)
    if shots != "all":
        search_part = few_shot_subset(
            train_labels, search_part, int(shots), seed, SEARCH_SHOTS_STREAM,
            f"{where}, search split (training samples left after holding out validation)",
        )
        final_part = few_shot_subset(train_labels, final_part, int(shots), seed, FINAL_SHOTS_STREAM, f"{where}, training set")
    return search_part, validation_part, final_part


def rows_used(train_labels: np.ndarray, shots: str, seed: int, val_fraction: float, where: str) -> np.ndarray | None:
    """The training rows a run reads (sorted), or None when it reads them all (N = all).

    A few-shot run trains on N per class but validates on the full validation split, so
    it needs about ``val_fraction`` of the rows plus its two N-shot samples.
    """
    if shots == "all":
        return None
    return np.unique(np.concatenate(run_selections(train_labels, shots, seed, val_fraction, where)))


# the study --------------------------------------------------------------------------------


def study_name(
    train_features: np.ndarray, train_labels: np.ndarray, settings: SearchSettings, shots: str, seed: int, data=None
) -> str:
    """A name that changes whenever anything that defines the study's trials changes.

    ``data``: :func:`data_digest` of the same features and labels, when several studies
    share them (it is copied, not changed).
    """
    digest = (data if data is not None else data_digest(train_features, train_labels)).copy()
    defining = {k: v for k, v in settings.defining().items() if k != "trials"}
    digest.update(json.dumps({**defining, "shots": shots, "seed": seed}, sort_keys=True).encode())
    return f"probe-{digest.hexdigest()}"


def data_digest(train_features: np.ndarray, train_labels: np.ndarray):
    """The hash of the training data a study's name starts from."""
    digest = hashlib.blake2b(digest_size=10)
    digest.update(np.ascontiguousarray(train_features).data)
    digest.update(np.ascontiguousarray(train_labels, dtype=np.int64).data)
    return digest


def open_study(journal: str, name: str, seed: int):
    """Create or resume the study; trials a killed job left running are marked failed."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # Absolute, as Optuna's lock is a symlink to the journal, resolved from the link's folder.
    path = Path(journal).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Snakemake runs one job per result, so a lock beside the journal was left by a killed job
    # (SIGKILL leaves Optuna's symlink behind); waiting for it would never end.
    lock = Path(f"{path}.lock")
    if lock.is_symlink() or lock.exists():
        log.warning("%s: removing the lock a killed job left", lock)
        lock.unlink()
    drop_cut_record(path)
    try:
        storage = JournalStorage(JournalFileBackend(str(path)))
        study = optuna.create_study(
            study_name=name, storage=storage, sampler=trial_sampler(seed, 0), direction="maximize", load_if_exists=True
        )
    except ValueError as error:  # a record in the middle is not JSON: not a journal Optuna wrote
        raise DamagedJournalError(
            f"{journal}: not a readable Optuna journal ({error}); delete it (rm {shlex.quote(journal)}) and re-run "
            "Snakemake: the search starts over and ends with the result it would have had"
        ) from error
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        study.tell(trial.number, state=TrialState.FAIL)
    return study


def drop_cut_record(path: Path) -> None:
    """A journal whose last record was cut short (a kill in the middle of a write, an interrupted
    copy) loses that record, as if the kill had come before the write: Optuna would append the
    next record to its half and then fail to read the journal back."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as stream:
        stream.seek(-1, os.SEEK_END)
        if stream.read(1) == b"\n":
            return
        stream.seek(0)
        whole = stream.read()
        stream.truncate(whole.rfind(b"\n") + 1)
    log.warning("%s: its last record was cut short (%d bytes); dropped, its trial runs again", path,
                len(whole) - whole.rfind(b"\n") - 1)


def trial_sampler(seed: int, position: int) -> optuna.samplers.TPESampler:
    """The sampler that proposes a study's trial ``position`` (counted among complete trials),
    seeded by the run seed and the position alone: what it proposes depends on the complete
    trials before it, never on how many trials this process asked, so a resumed study
    proposes what the uninterrupted one would have."""
    return optuna.samplers.TPESampler(multivariate=True, seed=stream_seed(seed, PROPOSAL_STREAM, position))


def stream_seed(seed: int, *purpose: int) -> int:
    return int(np.random.SeedSequence([seed, *purpose]).generate_state(1)[0])


def scored_trials(study, limit: int) -> list[dict]:
    """The first ``limit`` complete trials, in order, numbered by their position among them
    (trials a killed job left running failed and take no position)."""
    complete = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number)
    return [
        {
            "number": position,
            "lr": trial.params["lr"],
            "weight_decay": trial.params["weight_decay"],
            "val_top1": trial.value,
            "diverged": bool(trial.user_attrs.get("diverged", False)),
        }
        for position, trial in enumerate(complete[:limit])
    ]


def shares_passes(settings: SearchSettings) -> bool:
    """Whether runs of this kind train together (:func:`imagenet_cog.probes.linear.train_probe_runs`);
    the MLP kinds train one run at a time."""
    return KINDS[settings.kind].linear_protocol


def train_runs(features, labels, rows: list, num_classes: int, lrs: list, weight_decays: list, settings: SearchSettings,
               seeds: list[int], precision: str) -> list:
    """Each run's probes: run r trains ``lrs[r]`` on the rows ``rows[r]`` (a device index
    tensor, or None for every row) of ``features``, seeded with ``seeds[r]``. Linear kinds
    share one pass when every run has as many rows and candidates; otherwise, and for the
    MLP kinds, the runs train one after another."""
    schedule = SGDSchedule(settings.epochs, settings.batch_size, settings.momentum)
    sizes = {features.shape[0] if part is None else part.numel() for part in rows}
    fused = {"fused": resolve_fused(settings.fused, features.device)} if shares_passes(settings) else {}
    if shares_passes(settings) and len(sizes) == 1 and len({len(rates) for rates in lrs}) == 1:
        stacked = None if all(part is None for part in rows) else torch.stack([
            torch.arange(features.shape[0], device=features.device) if part is None else part for part in rows
        ])
        return train_probe_runs(features, labels, num_classes, stacked, lrs, weight_decays, schedule, seeds, precision,
                                **fused)
    trainer = probe_trainer(settings)
    return [
        trainer(
            *(features, labels) if part is None else (features.index_select(0, part), labels.index_select(0, part)),
            num_classes, lrs=rates, weight_decays=decays, schedule=schedule, seed=seed, precision=precision, **fused,
        )
        for part, rates, decays, seed in zip(rows, lrs, weight_decays, seeds)
    ]


def run_searches(studies: list, features, labels, search_rows: list, validation_rows: list, num_classes: int,
                 settings: SearchSettings, seeds: list[int], precision: str) -> None:
    """Run trials until every study has ``settings.trials`` complete ones.

    Study r trains on the rows ``search_rows[r]`` and is scored on ``validation_rows[r]`` of
    ``features``/``labels`` (tensors on the probe device; ``precision`` is the resolved
    matmul precision). Each round asks every unfinished study for its next candidates
    (``trials_per_batch`` of them) and trains them together: each study is exactly the
    sequential search it would be alone, and the studies share the passes.
    """
    space = {
        "lr": FloatDistribution(*settings.lr_range, log=True),
        "weight_decay": FloatDistribution(*settings.wd_range, log=True),
    }
    while True:
        pending, first = {}, {}
        for run, study in enumerate(studies):
            done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
            if done < settings.trials:
                count = min(settings.trials_per_batch, settings.trials - done)
                first[run] = done
                pending[run] = [propose(study, seeds[run], done + offset, space) for offset in range(count)]
        if not pending:
            return
        runs = list(pending)
        # a candidate's draws (initialisation, batch orders) follow the seed and its position,
        # as the proposals do: a resumed search trains what the uninterrupted one would have
        trained = train_runs(
            features, labels, [search_rows[run] for run in runs], num_classes,
            [[t.params["lr"] for t in pending[run]] for run in runs],
            [[t.params["weight_decay"] for t in pending[run]] for run in runs],
            settings, [stream_seed(seeds[run], first[run]) for run in runs], precision,
        )
        for run, probes in zip(runs, trained):
            accuracies = probes.topk_accuracy(features, labels, ks=(1,), rows=validation_rows[run])[:, 0].tolist()
            for offset, (trial, accuracy, diverged) in enumerate(zip(pending[run], accuracies, probes.diverged)):
                trial.set_user_attr("diverged", diverged)
                studies[run].tell(trial, accuracy)
                log.info(
                    "seed %d trial %d: lr=%.4g weight_decay=%.3g val_top1=%.2f%s",
                    seeds[run], first[run] + offset, trial.params["lr"], trial.params["weight_decay"], accuracy,
                    " (diverged)" if diverged else "",
                )


def propose(study, seed: int, position: int, space: dict):
    """The study's trial at ``position``, asked of the sampler of that position."""
    study.sampler = trial_sampler(seed, position)
    return study.ask(space)


def probe_trainer(settings: SearchSettings):
    """``train(features, labels, num_classes, lrs, weight_decays, schedule, seed, precision)``
    of the settings' kind."""
    if settings.kind not in SEARCHED_KINDS:
        raise ValueError(f"probe kind must be one of {SEARCHED_KINDS}, not {settings.kind!r}")
    kind = KINDS[settings.kind]
    if kind.linear_protocol:
        return train_probes
    return partial(
        train_mlps, hidden_width=settings.hidden_width, hidden_layers=settings.hidden_layers, **kind.trainer_options
    )


def final_fit_seed(seed: int) -> int:
    return stream_seed(seed, FINAL_FIT_STREAM)


def final_fit(features, labels, num_classes: int, best: dict, settings: SearchSettings, seed: int, precision: str):
    """The final probe: the best (lr, weight decay) trained on the final-fit rows.

    Deterministic for given rows, settings, seed and precision on one device, so the
    label-noise audit can refit a classifier that was not kept (imagenet_cog/probes/classifier.py); a
    final fit that shared its passes with other seeds' is the same probe.
    """
    return train_runs(
        features, labels, [None], num_classes, [[best["lr"]]], [[best["weight_decay"]]], settings,
        [final_fit_seed(seed)], precision,
    )[0]


# one probe job ----------------------------------------------------------------------------


def contiguous_labels(train_labels: np.ndarray, test_labels: np.ndarray, test_path: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Labels renumbered 0..C-1 over the training classes; test classes must be among them."""
    classes = np.unique(train_labels)
    unknown = np.setdiff1d(np.unique(test_labels), classes)
    if unknown.size:
        raise ProbeDataError(
            f"{test_path}: test labels {unknown[:10].tolist()} do not occur in the training features; "
            f"train and test features of a dataset must come from the same split list (rerun the "
            f"splits and features rules for this dataset)."
        )
    return np.searchsorted(classes, train_labels), np.searchsorted(classes, test_labels), int(classes.size)


def normalised_on_device(features: np.ndarray, device, precision: str, where: str, normalise: bool = True):
    """Features on the probe device, L2-normalised unless ``normalise`` is false (the MLP
    kinds read raw features); non-finite values are an extraction fault."""
    loaded = torch.from_numpy(np.ascontiguousarray(features)).to(device)
    dtype = feature_dtype(precision, device, loaded.dtype)
    on_device = l2_normalise(loaded, dtype) if normalise else loaded.to(dtype)
    if not bool(torch.isfinite(on_device).all()):
        raise ProbeDataError(
            f"{where}: the features contain NaN or infinite values; delete the feature files of "
            f"this model and dataset and extract them again (features.dtype: float32 if a model's "
            f"activations overflow float16)."
        )
    return on_device


@dataclass(frozen=True, eq=False)
class ProbeJob:
    """What one probe job probes and how: the same for every run (N, seed) it makes, passed
    whole from :func:`probe_dataset` down to :func:`probe_prepared`.

    ``train_labels`` are the labels of the whole training set; ``train_features`` holds the
    rows ``train_rows`` of it (sorted indices, at least :func:`rows_used` of every run), or all
    rows when None. A study's name hashes the rows its run uses, so it is the same whichever
    superset of them is given. ``where`` and ``test_path`` name the data in errors.
    ``return_classifier``: the results at N = all also hold ``classifier``, the final fit's
    (weight [C, D], bias [C]) as float32 arrays on the host (not a result JSON field).
    """

    train_features: np.ndarray
    train_labels: np.ndarray
    test_features: np.ndarray
    test_labels: np.ndarray
    settings: SearchSettings
    device: str = "auto"
    where: str = "dataset"
    test_path: str = "test features"
    train_rows: np.ndarray | None = None
    return_classifier: bool = False


def probe_dataset(job: ProbeJob, *, shots: str, seed: int, journal: str) -> dict:
    """Search, final fit and test scores of one run; the result fields of the module doc."""
    return probe_seeds(job, shots=shots, seeds=[seed], journals=[journal])[0]


def probe_seeds(job: ProbeJob, *, shots: str, seeds: list[int], journals: list[str]) -> list[dict]:
    """:func:`probe_dataset` for several seeds of one dataset and N at once, one result each.

    The features are read and moved to the device once; the seeds' searches run round by
    round, each seed's next candidates trained in one pass with the others' (each study is
    the sequential search it would be alone), and the final fits share one pass. Every
    seed's study, journal (``journals[r]``), selections and result are those of its own run;
    the products are only grouped differently (the last bits of a weight may differ).
    """
    return next(probe_grid(job, shots=[shots], seeds=seeds, journals=[journals]))


def probe_grid(job: ProbeJob, *, shots: list[str], seeds: list[int], journals: list[list[str]]):
    """:func:`probe_seeds` for every N of ``shots`` in turn on features prepared once (the
    resident job, ``probes.group: dataset``): yields each N's results (one per seed, with
    ``journals[i][r]`` the journal of N ``shots[i]`` and seed ``seeds[r]``) as soon as its
    seeds are done. Only the N = all runs keep their classifiers (``job.return_classifier``).

    Each run's selections, study, journal and result are those of its own job; only the
    reading and preparing of the features (``resident_job.load_s``) is shared.
    """
    if len(journals) != len(shots) or any(len(row) != len(seeds) for row in journals) or not seeds:
        raise ValueError("probe_grid needs one journal per N and seed")
    started = time.perf_counter()
    data = prepare(job)
    loaded = time.perf_counter() - started
    for position, (shot, shot_journals) in enumerate(zip(shots, journals)):
        with probe_matmul_precision(data.target):
            results = probe_prepared(data, job, shots=shot, seeds=seeds, journals=shot_journals,
                                     started=started if position == 0 else time.perf_counter())
        if len(shots) > 1:
            for result in results:
                result["resident_job"] = {"shots": [s if s == "all" else int(s) for s in shots], "seeds": list(seeds),
                                          "load_s": loaded}
        yield results


def probe_matmul_precision(target: torch.device):
    """On a GPU, float32 products as TF32 with float32 accumulation (ample for a convex linear
    probe) while the probes train and score; the process's previous setting afterwards."""
    return float32_matmul_precision("high", target)


@dataclass
class ProbeData:
    """One job's training and test data, prepared on the probe device once for all its runs."""

    train_features: np.ndarray  # the rows held, on the host: their hash names the studies
    train_labels: np.ndarray  # the file's labels of the whole training set
    train_y: np.ndarray  # the same, renumbered 0..C-1
    held: np.ndarray  # which training rows train_features holds (sorted)
    features: torch.Tensor  # normalised train_features on the device
    labels: torch.Tensor
    test_features: torch.Tensor
    test_labels: torch.Tensor
    test_size: int
    num_classes: int
    target: torch.device
    precision: str  # resolved
    whole_digest: object = None  # data_digest of all rows, computed once for every N = all study

    def on_device(self, indices: np.ndarray) -> torch.Tensor | None:
        """Positions of ``indices`` among the rows held, on the device; None for all of them."""
        if indices.size == self.held.size:  # all rows held (sorted)
            return None
        return torch.from_numpy(np.searchsorted(self.held, indices)).to(self.target)


def prepare(job: ProbeJob) -> ProbeData:
    """The job's features normalised on its device and its labels renumbered, once for all runs."""
    target = resolve_device(job.device, "probes.device")
    precision = resolve_precision(job.settings.precision, target)
    train_y, test_y, num_classes = contiguous_labels(job.train_labels, job.test_labels, job.test_path)
    held = np.arange(train_y.size) if job.train_rows is None else np.asarray(job.train_rows, dtype=np.int64)
    if held.size != job.train_features.shape[0]:
        raise ValueError(f"{job.where}: the training features given do not hold the rows this run uses")
    normalise = job.settings.normalised_inputs
    with probe_matmul_precision(target):
        return ProbeData(
            job.train_features, job.train_labels, train_y, held,
            normalised_on_device(job.train_features, target, precision, job.where, normalise),
            torch.from_numpy(train_y[held].astype(np.int64)).to(target),
            normalised_on_device(job.test_features, target, precision, job.test_path, normalise),
            torch.from_numpy(test_y.astype(np.int64)).to(target), int(test_y.size), num_classes, target, precision,
        )


@dataclass
class SearchOutcome:
    """The searches of one N's runs, one entry per run: the study's name, the trials it had
    before this job, its scored trials, the finalists (two-stage search only) and the chosen trial."""

    names: list[str]
    resumed: list[int]
    trials: list[list[dict]]
    finalists: list[list[dict]] | None
    bests: list[dict]


def probe_prepared(data: ProbeData, job: ProbeJob, *, shots: str, seeds: list[int], journals: list[str],
                   started: float) -> list[dict]:
    """The searches, final fits and test scores of the seeds of one N on prepared data."""
    if len(seeds) != len(journals) or not seeds:
        raise ValueError("probe_prepared needs one journal per seed")
    settings = job.settings
    # selections group by the file's own labels, so errors name classes as the split table does
    selections = [run_selections(data.train_labels, shots, seed, settings.val_fraction, job.where) for seed in seeds]
    if data.held.size != data.train_y.size and not np.isin(
        np.concatenate([part for parts in selections for part in parts]), data.held
    ).all():
        raise ValueError(f"{job.where}: the training features given do not hold the rows this run uses")
    search = search_runs(data, settings, shots=shots, seeds=seeds, journals=journals, selections=selections)
    searched = time.perf_counter()
    probes = train_runs(
        data.features, data.labels, [data.on_device(parts[2]) for parts in selections], data.num_classes,
        [[best["lr"]] for best in search.bests], [[best["weight_decay"]] for best in search.bests], settings,
        [final_fit_seed(seed) for seed in seeds], data.precision,
    )
    scores = [probe.topk_accuracy(data.test_features, data.test_labels, ks=(1, 5))[0].tolist() for probe in probes]
    finished = time.perf_counter()
    timings = {"search_s": searched - started, "final_s": finished - searched, "total_s": finished - started}
    results = []
    for run, seed in enumerate(seeds):
        kept = classifier_of(probes[run]) if job.return_classifier and shots == "all" else {}
        results.append({
            **kept,
            **run_result_fields(search, run, shots=shots, seed=seed, probe=probes[run], scores=scores[run],
                                n_train=int(selections[run][2].size), journal=journals[run]),
            "timings": dict(timings),
            "seeds_together": list(seeds),
            **job_result_fields(data, settings),
            **({"protocol_deviations": settings.deviations, "finalists": search.finalists[run]} if search.finalists else {}),
        })
    return results


def study_names(data: ProbeData, settings: SearchSettings, *, shots: str, seeds: list[int],
                selections: list[tuple]) -> list[str]:
    """Each run's study name; the study is bound to the precision its trials ran at, not to
    how it was asked for."""
    defining = replace(settings, precision=data.precision)
    names = []
    for seed, parts in zip(seeds, selections):
        used = None if shots == "all" else np.unique(np.concatenate(parts))  # as rows_used gives them
        if used is None or used.size == data.held.size:
            if data.whole_digest is None:  # N = all: one hash of the features for every seed
                data.whole_digest = data_digest(data.train_features, data.train_y)
            names.append(study_name(data.train_features, data.train_y, defining, shots, seed, data=data.whole_digest))
        else:
            names.append(study_name(data.train_features[np.searchsorted(data.held, used)], data.train_y, defining, shots,
                                    seed))
    return names


def search_runs(data: ProbeData, settings: SearchSettings, *, shots: str, seeds: list[int], journals: list[str],
                selections: list[tuple]) -> SearchOutcome:
    """Opens (or resumes) each run's study, runs the missing trials of all of them together and
    picks each run's best trial (of the finalists when the search has two stages)."""
    names = study_names(data, settings, shots=shots, seeds=seeds, selections=selections)
    studies = [open_study(journal, name, seed) for journal, name, seed in zip(journals, names, seeds)]
    resumed = [len(scored_trials(study, settings.trials)) for study in studies]
    search_rows = [data.on_device(parts[0]) for parts in selections]
    validation_rows = [data.on_device(parts[1]) for parts in selections]
    searching = settings if settings.two_stage is None else replace(settings, epochs=settings.two_stage[0])
    run_searches(studies, data.features, data.labels, search_rows, validation_rows, data.num_classes, searching, seeds,
                 data.precision)
    trials = [scored_trials(study, settings.trials) for study in studies]
    finalists = None
    if settings.two_stage is not None:
        finalists = run_finalists(trials, journals, names, seeds, data, search_rows, validation_rows, settings)
    bests = [max(scored, key=lambda t: t["val_top1"]) for scored in (finalists or trials)]
    return SearchOutcome(names=names, resumed=resumed, trials=trials, finalists=finalists, bests=bests)


def classifier_of(probes) -> dict:
    """The final fit's classifier, as ``probe_prepared`` returns it beside a result."""
    return {"classifier": (probes.weight[0].float().cpu().numpy(), probes.bias[0].float().cpu().numpy())}


def run_result_fields(search: SearchOutcome, run: int, *, shots: str, seed: int, probe, scores: list[float],
                      n_train: int, journal: str) -> dict:
    """The result fields of one run: its search, final fit and scores."""
    best = search.bests[run]
    return {
        "shots": shots if shots == "all" else int(shots),
        "seed": seed,
        "best_params": {"lr": best["lr"], "weight_decay": best["weight_decay"]},
        "val_top1": best["val_top1"],
        "test_top1": scores[0],
        "test_top5": scores[1],
        "final_diverged": probe.diverged[0],
        "n_trials": len(search.trials[run]),
        "trials": search.trials[run],
        "n_train": n_train,
        "study": {"journal": str(journal), "name": search.names[run], "resumed_trials": search.resumed[run]},
    }


def job_result_fields(data: ProbeData, settings: SearchSettings) -> dict:
    """The result fields every run of a job shares: data sizes, settings, versions, device."""
    target = data.target
    return {
        "n_test": data.test_size,
        "n_classes": data.num_classes,
        "feature_dim": int(data.train_features.shape[1]),
        "settings": {**settings.defining(), "lr_range": list(settings.lr_range), "wd_range": list(settings.wd_range),
                     **({"two_stage": list(settings.two_stage)} if settings.two_stage else {})},
        "versions": stack_versions(),
        "device": str(target) if target.type == "cpu" else torch.cuda.get_device_name(target),
        "matmul_precision": "tf32" if data.precision == "float32" and target.type == "cuda" else data.precision,
        "probe_step": step_description(shares_passes(settings) and resolve_fused(settings.fused, target)),
    }


def run_finalists(trials: list[list[dict]], journals: list[str], names: list[str], seeds: list[int], data: ProbeData,
                  search_rows: list, validation_rows: list, settings: SearchSettings) -> list[list[dict]]:
    """The two-stage search's second stage (``probes.two_stage``, a protocol deviation): each
    run's ``finalists`` best trials of the short first stage trained again at full length on
    the search rows and scored on the validation rows; the best of them is the run's choice.

    The finalists are the trials of a second study beside the first (its name plus
    ``-finalists``, in the same journal), so a killed job resumes them too.
    """
    finalists = settings.two_stage[1]
    studies = []
    for scored, journal, name, seed in zip(trials, journals, names, seeds):
        chosen = sorted(scored, key=lambda t: (-t["val_top1"], t["number"]))[:finalists]
        study = open_study(journal, f"{name}-finalists", seed)
        done = {(t["lr"], t["weight_decay"]) for t in scored_trials(study, finalists)}
        for trial in chosen:
            if (trial["lr"], trial["weight_decay"]) not in done:
                study.enqueue_trial({"lr": trial["lr"], "weight_decay": trial["weight_decay"]})
        studies.append(study)
    run_searches(studies, data.features, data.labels, search_rows, validation_rows, data.num_classes,
                 replace(settings, trials=finalists, trials_per_batch=finalists), seeds, data.precision)
    return [scored_trials(study, finalists) for study in studies]
