"""A training run's checkpoints as one series: each checkpoint evaluated as a model of its own.

A ``models:`` entry with ``checkpoints`` (a path pattern with one ``{step}`` field, or a
``{step: path}`` map) instead of ``weights`` stands for one model per checkpoint, named
``<series>@<step>`` (:func:`checkpoint_model`); its outputs are keyed by that name and its
identity is its file's content, as any checkpoint's. A checkpoint whose content equals an
earlier step's is evaluated once: its ``same_as`` names the step's model that stands for it.
"""

from __future__ import annotations

from dataclasses import dataclass

# between a series' name and a step in a checkpoint's model name: dino@40
STEP_SEPARATOR = "@"
# the axis a series' steps are counted on (models.<name>.step_unit)
STEP_UNITS = ("epoch", "iteration", "images_seen")


def checkpoint_model(series: str, step: int) -> str:
    """The model name of ``series``' checkpoint at ``step``: its outputs' folder name."""
    return f"{series}{STEP_SEPARATOR}{step}"


@dataclass(frozen=True)
class SeriesCheckpoint:
    step: int
    # the model this checkpoint is evaluated as (checkpoint_model(series, step))
    model: str
    # the checkpoint file as found when the Snakefile was read
    path: str
    # an earlier step's model with identical content, whose results stand for this one's
    same_as: str | None = None
    # named to take the run's full protocol too (its model is then among the result models)
    full_protocol: bool = False


@dataclass(frozen=True)
class Series:
    # the models: entry that names the checkpoints
    name: str
    step_unit: str
    # ordered by step
    checkpoints: tuple[SeriesCheckpoint, ...]

    def evaluated(self) -> tuple[SeriesCheckpoint, ...]:
        """The checkpoints that are evaluated: each distinct content once, at its first step."""
        return tuple(checkpoint for checkpoint in self.checkpoints if checkpoint.same_as is None)
