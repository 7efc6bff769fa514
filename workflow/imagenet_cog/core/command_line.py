"""What the package's commands share on their command lines, written once: the log's setup,
the device option, and the options naming an open_clip image-text model and its weights."""

from __future__ import annotations

import argparse
import logging
import sys

from .device import DEVICE_CHOICES


def setup_logging(to_stdout: bool = False) -> None:
    """INFO and above: a job's log (stderr) stamps each line with its time and level; a command
    whose messages are its report (``to_stdout``) prints them alone."""
    if to_stdout:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    else:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)


def add_device_option(parser: argparse.ArgumentParser, default: str = "auto") -> None:
    """--device: auto (a GPU when there is one), cpu or cuda (core.device resolves it)."""
    parser.add_argument("--device", choices=DEVICE_CHOICES, default=default)


def add_open_clip_model_options(parser: argparse.ArgumentParser) -> None:
    """The config entry of an open_clip image-text model, as the rules pass it."""
    parser.add_argument("--model-name", required=True, help="the model's name in config.yaml's models")
    parser.add_argument("--arch", required=True, help="open_clip/<model name>")
    parser.add_argument("--weights", required=True, help="an open_clip pretrained tag, a checkpoint file or random[:seed]")
    parser.add_argument("--trusted-globals", nargs="*", default=[], help="objects the checkpoint may hold besides tensors")
