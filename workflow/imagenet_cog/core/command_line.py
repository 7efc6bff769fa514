"""What the package's commands share on their command lines, written once: the log's setup,
the device and threads options, a job's feature files, model and dataset, and
the options naming an open_clip image-text model, its weights and the device it runs on, and
what a results command reads and writes."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable

from .device import DEVICE_CHOICES

FEATURE_FILES = {"train": "training", "test": "test"}


def setup_logging(to_stdout: bool = False) -> None:
    """INFO and above: a job's log (stderr) stamps each line with its time and level; a command
    whose messages are its report (``to_stdout``) prints them alone."""
    if to_stdout:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    else:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)


def add_device_option(parser: argparse.ArgumentParser, use: str) -> None:
    """--device: auto (a GPU when there is one), cpu or cuda (core.device resolves it); its help
    says what the command does there (``use``)."""
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="auto",
                        help=f"where {use}: auto (a GPU when there is one), cpu or cuda")


def add_open_clip_model_options(parser: argparse.ArgumentParser, use: str) -> None:
    """The config entry of an open_clip image-text model, as the rules pass it, and its device
    (where the model does ``use``)."""
    parser.add_argument("--model-name", required=True, help="the model's name in config.yaml's models")
    parser.add_argument("--arch", required=True, help="open_clip/<model name>")
    parser.add_argument("--weights", required=True, help="an open_clip pretrained tag, a checkpoint file or random[:seed]")
    parser.add_argument("--trusted-globals", nargs="*", default=[], help="objects the checkpoint may hold besides tensors")
    add_device_option(parser, f"the model {use}")


def add_job_options(parser: argparse.ArgumentParser, *splits: str) -> None:
    """A job's feature files (--train and/or --test: one model's features of one dataset's split,
    HDF5) and the --model and --dataset its result names."""
    for split in splits:
        parser.add_argument(f"--{split}", required=True, help=f"{FEATURE_FILES[split]} features (HDF5)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)


def add_compute_options(parser: argparse.ArgumentParser, use: str, threads: int | None = 1) -> None:
    """--device and --threads: where a job computes (``use``, for the help), and the CPU threads
    PyTorch (or faiss) uses (``threads`` the default; None: the library's own choice)."""
    add_device_option(parser, use)
    parser.add_argument("--threads", type=int, default=threads, help="CPU threads for PyTorch")


def add_summary_options(parser: argparse.ArgumentParser, seed_results: bool = False) -> None:
    """What a results command reads and where it writes: --summary (aggregate-probes' tidy CSV),
    --results-root (the run's results folder: its tables/ and figures/), and with
    ``seed_results`` --seed-results (every probe result) and --baseline (the model relative
    tables and figures subtract)."""
    parser.add_argument("--summary", required=True, type=Path, help="the results summary (aggregate-probes)")
    parser.add_argument("--results-root", required=True, help="tables go to <root>/tables/, figures to <root>/figures/")
    if seed_results:
        parser.add_argument("--seed-results", required=True, help="per-seed results (aggregate-probes)")
        parser.add_argument("--baseline", required=True, help="model the relative tables and figures subtract")


def compared_results_arguments(argv: list[str], command: str, description: str, models: str,
                               results: str, add_options: Callable[[argparse.ArgumentParser], None] | None = None
                               ) -> argparse.Namespace:
    """The arguments of a results command comparing result files of its own with the summary's
    linear probe: the summary options, --models (JSON: the config entries of ``models``),
    --datasets (in its figures' order) and --results (the ``results`` result JSONs); and those
    ``add_options`` adds."""
    parser = argparse.ArgumentParser(prog=f"python -m imagenet_cog {command}", description=description)
    add_summary_options(parser)
    parser.add_argument("--models", required=True, help=f"JSON: the config entries of the {models}")
    parser.add_argument("--datasets", nargs="+", required=True, help="the datasets, in the figures' order")
    parser.add_argument("--results", nargs="+", type=Path, required=True, help=f"the {results} result JSONs")
    if add_options is not None:
        add_options(parser)
    return parser.parse_args(argv)
