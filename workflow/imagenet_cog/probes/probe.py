"""The ``probe`` command: one probe job, from its feature files to its result JSONs.

It reads the training labels, then only the training rows its seeds use (a few-shot run
needs about a fifth of the file) and the test features; projects both onto the first d
principal components for the ``pca-<d>`` kind (:mod:`imagenet_cog.probes.pca`); runs the
search and final fit of every seed and N (:mod:`imagenet_cog.probes.search`, which documents the
result JSON); writes each seed's result atomically; and, for the linear probe at N = all,
keeps the final classifier beside it (:mod:`imagenet_cog.probes.classifier`).
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

from imagenet_cog.core.command_line import add_compute_options, add_job_options, setup_logging
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import write_json
from imagenet_cog.core.naming import LINEAR, PCA
from imagenet_cog.features.store import read_features, read_labels
from imagenet_cog.probes.classifier import ClassifierError, keep_classifier
from imagenet_cog.probes.fused_step import FUSED_CHOICES
from imagenet_cog.probes.kinds import SEARCHED_KINDS
from imagenet_cog.probes.pca import check_dim, read_components
from imagenet_cog.probes.search import ProbeDataError, ProbeJob, SearchSettings, probe_grid, rows_used

log = logging.getLogger("imagenet_cog.probes.probe")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog probe", description=__doc__.split("\n")[0])
    add_job_options(parser, "train", "test")
    parser.add_argument("--output", required=True, nargs="+",
                        help="result JSON, one per seed (with several --shots one per N and seed: every seed of the "
                             "first N, then of the next)")
    parser.add_argument("--study", required=True, nargs="+",
                        help="Optuna journal file (kept across runs), one per seed (or N and seed, as --output)")
    parser.add_argument("--shots", required=True, nargs="+",
                        help="samples per class, or 'all'; several: one job runs every N on the features read once")
    parser.add_argument("--seed", type=int, required=True, nargs="+",
                        help="the run's seed; several seeds of one dataset and N share their passes")
    defaults = SearchSettings()
    parser.add_argument("--trials", type=int, default=defaults.trials)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--momentum", type=float, default=defaults.momentum)
    parser.add_argument("--lr-range", type=float, nargs=2, default=defaults.lr_range)
    parser.add_argument("--wd-range", type=float, nargs=2, default=defaults.wd_range)
    parser.add_argument("--val-fraction", type=float, default=defaults.val_fraction)
    parser.add_argument("--trials-per-batch", type=int, default=defaults.trials_per_batch)
    add_compute_options(parser, "the search's candidates and the final probe are trained and scored")
    parser.add_argument("--precision", choices=["auto", "float32", "bfloat16"], default=defaults.precision,
                        help="matmul operands; auto: bfloat16 where the device multiplies it natively")
    parser.add_argument("--kind", choices=SEARCHED_KINDS, default=defaults.kind, help="the probe's kind")
    parser.add_argument("--hidden-width", type=int, default=defaults.hidden_width, help="MLP kinds: units per hidden layer")
    parser.add_argument("--hidden-layers", type=int, default=defaults.hidden_layers, help="MLP kinds: hidden layers")
    parser.add_argument("--pca-dim", type=int, default=0, help="pca kind: principal components kept (d)")
    parser.add_argument("--pca-components", help="pca kind: the components file (pca-components)")
    parser.add_argument("--fused", choices=FUSED_CHOICES, default=defaults.fused,
                        help="the fused probe step (imagenet_cog/probes/fused_step.py); auto: on a GPU")
    parser.add_argument("--two-stage", type=int, nargs=2, metavar=("SHORT_EPOCHS", "FINALISTS"),
                        help="a protocol deviation: every trial trained SHORT_EPOCHS epochs, then the FINALISTS "
                             "best again at full length, the best of those chosen (probes.two_stage)")
    return parser


def main(argv: list[str]) -> int:
    """``probe``: search, fit and score one probe per seed; writes each result JSON atomically."""
    args = _parser().parse_args(argv)
    setup_logging()
    check_runs(args)
    torch.set_num_threads(max(1, args.threads))
    try:
        check_settings(args)
        where = f"{args.dataset} ({args.train})"
        # A few-shot run reads only the rows it uses (its validation split and N-shot samples).
        train_labels = read_labels(args.train)
        used = [rows_used(train_labels, shots, seed, args.val_fraction, where) for shots in args.shots for seed in args.seed]
        train_rows = None if any(rows is None for rows in used) else np.unique(np.concatenate(used))
        train = read_features(args.train, rows=train_rows)
        test = read_features(args.test)
        train_features, test_features = projected(args, train.features, test.features)
        settings = search_settings(args)
        job = ProbeJob(
            train_features, train_labels, test_features, test.labels, settings=settings, device=args.device,
            where=where, test_path=args.test, train_rows=train_rows, return_classifier=args.kind == LINEAR,
        )
        seeds = len(args.seed)
        journals = [args.study[i * seeds : (i + 1) * seeds] for i in range(len(args.shots))]
        # each N's results are written as soon as its seeds are done
        for position, results in enumerate(probe_grid(job, shots=args.shots, seeds=args.seed, journals=journals)):
            for output, result in zip(args.output[position * seeds : (position + 1) * seeds], results):
                write_result(output, result, args, settings, bool(train.metadata.get("random_weights", False)))
    except (ProbeDataError, SettingsError) as error:
        log.error("%s", error)
        return 1
    return 0


class SettingsError(ExplainedError, ValueError):
    """A probes setting the command cannot run with; the message says what to fix in config.yaml."""


def check_runs(args: argparse.Namespace) -> None:
    """One output and study per N and seed, distinct seeds and N, each N positive or 'all'."""
    runs = len(args.seed) * len(args.shots)
    if not runs == len(args.output) == len(args.study) or len(set(args.seed)) != len(args.seed):
        raise SystemExit("--seed, --output and --study take one value per seed (with several --shots, --output and "
                         "--study one per N and seed), and the seeds must differ")
    for shots in args.shots:
        if shots != "all" and not (shots.isdigit() and int(shots) > 0):
            raise SystemExit(f"--shots must be a positive integer or 'all', not {shots!r}")
    if len(set(args.shots)) != len(args.shots):
        raise SystemExit(f"--shots must differ, not {' '.join(args.shots)}")


def check_settings(args: argparse.Namespace) -> None:
    """The two-stage deviation's numbers and the search ranges, before any file is read."""
    if args.two_stage and not (0 < args.two_stage[0] < args.epochs and 0 < args.two_stage[1] <= args.trials):
        raise SettingsError(
            f"probes.two_stage needs 0 < short_epochs < epochs ({args.epochs}) and 0 < finalists <= trials "
            f"({args.trials}), not {args.two_stage}; fix config.yaml."
        )
    for name, (low, high) in (("lr_range", args.lr_range), ("wd_range", args.wd_range)):
        if not 0 < low < high:
            raise SettingsError(f"probes.{name} must be [low, high] with 0 < low < high, not [{low}, {high}]; fix config.yaml.")


def projected(args: argparse.Namespace, train_features: np.ndarray, test_features: np.ndarray):
    """The features the probe reads: for the pca kind their first d principal components."""
    if args.kind != PCA:
        return train_features, test_features
    if not args.pca_components:
        raise SettingsError("--kind pca needs --pca-components")
    components = read_components(args.pca_components)
    try:
        check_dim(args.pca_dim, components, f"{args.dataset} ({args.pca_components})")
    except ValueError as error:
        raise SettingsError(str(error)) from error
    return components.project(train_features, args.pca_dim), components.project(test_features, args.pca_dim)


def search_settings(args: argparse.Namespace) -> SearchSettings:
    return SearchSettings(
        trials=args.trials,
        epochs=args.epochs,
        batch_size=args.batch_size,
        momentum=args.momentum,
        lr_range=tuple(args.lr_range),
        wd_range=tuple(args.wd_range),
        val_fraction=args.val_fraction,
        trials_per_batch=args.trials_per_batch,
        precision=args.precision,
        kind=args.kind,
        hidden_width=args.hidden_width,
        hidden_layers=args.hidden_layers,
        pca_dim=args.pca_dim if args.kind == PCA else 0,
        fused=args.fused,
        two_stage=tuple(args.two_stage) if args.two_stage else None,
    )


def write_result(output: str, result: dict, args, settings: SearchSettings, random_weights: bool) -> None:
    """One run's result JSON (atomically) and, for N = all, its classifier beside it."""
    classifier = result.pop("classifier", None)
    result = {
        "model": args.model,
        "dataset": args.dataset,
        "probe": settings.probe_name,
        "random_weights": random_weights,
        **result,
    }
    write_json(output, result)
    if classifier is not None:
        # Written after the result JSON and not a rule output, so adding it reran no probe;
        # the label-noise audit refits a missing one (see imagenet_cog/probes/classifier.py).
        try:
            keep_classifier(output, result, *classifier, args.train)
        except ClassifierError as error:
            log.warning("classifier not kept (the audit refits it): %s", error)
    log.info(
        "%s %s shots=%s seed=%d: val_top1=%.2f test_top1=%.2f test_top5=%.2f in %.1f s",
        args.model, args.dataset, result["shots"], result["seed"], result["val_top1"], result["test_top1"],
        result["test_top5"], result["timings"]["total_s"],
    )
