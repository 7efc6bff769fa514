"""A training run's checkpoints as one series: each checkpoint evaluated as a model of its own.

A ``models:`` entry with ``checkpoints`` (a path pattern with one ``{step}`` field, or a
``{step: path}`` map) instead of ``weights`` stands for one model per checkpoint, named
``<series>@<step>`` (:func:`checkpoint_model`); its outputs are keyed by that name and its
identity is its file's content, as any checkpoint's. A checkpoint is a file or, for an ``hf/``
arch, a folder (transformers' Trainer writes ``checkpoint-<step>`` folders), whose content is its
weights'. A checkpoint whose content equals an earlier step's is evaluated once: its ``same_as``
names the step's model that stands for it.

:func:`expand_series` reads an entry into a :class:`Series` while the Snakefile is read: the
pattern's files (the field matches digits only; other files it globs are passed over and
named), or the map's; files younger than ``series.settle_seconds`` (still being written; a
folder by its newest file) are left for the next run. A checkpoint's path never reaches a
job's command or params: the extraction gets ``--weights series:<model>``
(:func:`series_weights`) and finds the file in the jobs' environment (:data:`WEIGHTS_VARIABLE`,
:func:`resolve_weights`), so that a moved or copied folder reruns nothing; its content is
guarded by the weights identity.

Series checkpoints take a reduced protocol (:class:`SeriesProtocol`, the config's ``series:``
section, a ``models.<name>.series`` mapping over it): the linear probe at a few N, the first
seeds, fewer trials, the k-NN probe and the per-concept accuracy; the steps of
``full_protocol_steps`` take the run's full protocol besides.
"""

from __future__ import annotations

import glob
import json
import os
import re
import string
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

# between a series' name and a step in a checkpoint's model name: dino@40
STEP_SEPARATOR = "@"
# the axis a series' steps are counted on (models.<name>.step_unit)
STEP_UNITS = ("epoch", "iteration", "images_seen")
# the one field of a checkpoints pattern
STEP_FIELD = "step"
# full_protocol_steps: the series' last step, whichever it is at the time
LAST_STEP = "last"
# the keys of a series entry that are not keys of its checkpoints' models
SERIES_ENTRY_KEYS = ("checkpoints", "step_unit", "series", "weights")
# keys of a models: entry that describe the model rather than make its features
DESCRIPTIVE_KEYS = ("label", "category", "paper_name", "paper_category", "params_millions", "extra_data", "source",
                    "published_file", "pretraining_data")
# a series checkpoint's weights on a command line: the file is in the jobs' environment
SERIES_WEIGHTS_PREFIX = "series:"
WEIGHTS_VARIABLE = "IMAGENET_COG_SERIES_CHECKPOINTS"


class SeriesError(ValueError):
    """A series entry that cannot be read as one (its message names the model and the fix)."""


def checkpoint_model(series: str, step: int) -> str:
    """The model name of ``series``' checkpoint at ``step``: its outputs' folder name."""
    return f"{series}{STEP_SEPARATOR}{step}"


def is_series_entry(entry: Mapping[str, Any]) -> bool:
    return "checkpoints" in entry


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
class SeriesProtocol:
    """The reduced protocol of a series' checkpoints (the schema's ``series`` section)."""

    # the linear probe's N ("all" or a number of images per concept)
    shots: tuple[str, ...]
    # how many of probes.seeds, the first ones
    seeds: int
    # Optuna trials per search, at most probes.trials
    trials: int
    # the probe kinds scored by a job of their own per dataset (the k-NN), on the run's grid
    knn: bool
    concepts: bool
    # steps (or "last") that also take the run's full protocol
    full_protocol_steps: tuple[int | str, ...] = ()

    @classmethod
    def of(cls, settings: Mapping[str, Any], override: Mapping[str, Any] | None = None) -> "SeriesProtocol":
        merged = {**settings, **(override or {})}
        return cls(tuple(str(shots) for shots in merged["shots"]), int(merged["seeds"]), int(merged["trials"]),
                   bool(merged["knn"]), bool(merged["concepts"]), tuple(merged["full_protocol_steps"]))

    def probe_seeds(self, run_seeds: list[str]) -> list[str]:
        return list(run_seeds[:self.seeds])

    def probe_trials(self, run_trials: int) -> int:
        return min(self.trials, run_trials)

    def deviation(self, probes: Mapping[str, Any]) -> dict[str, Any]:
        """The deviation from the run's protocol, as results name deviations (``name`` first)."""
        return {"name": "series", "shots": list(self.shots),
                "seeds": self.probe_seeds([str(seed) for seed in probes["seeds"]]),
                "trials": self.probe_trials(probes["trials"]), "knn_probe": self.knn, "concepts": self.concepts}


@dataclass(frozen=True)
class Series:
    # the models: entry that names the checkpoints
    name: str
    step_unit: str
    # ordered by step
    checkpoints: tuple[SeriesCheckpoint, ...]
    protocol: SeriesProtocol | None = None
    # files the pattern globbed whose field is not an integer, and files left for the next run
    # (younger than series.settle_seconds: maybe still being written)
    passed_over: tuple[str, ...] = ()
    unsettled: tuple[str, ...] = ()
    # full_protocol_steps naming a step the series does not have (yet)
    unknown_full_steps: tuple[int, ...] = ()

    def evaluated(self) -> tuple[SeriesCheckpoint, ...]:
        """The checkpoints that are evaluated: each distinct content once, at its first step."""
        return tuple(checkpoint for checkpoint in self.checkpoints if checkpoint.same_as is None)

    def reduced(self) -> tuple[SeriesCheckpoint, ...]:
        """The evaluated checkpoints that take the reduced protocol alone."""
        return tuple(checkpoint for checkpoint in self.evaluated() if not checkpoint.full_protocol)

    def full(self) -> tuple[SeriesCheckpoint, ...]:
        """The evaluated checkpoints that also take the run's full protocol (result models)."""
        return tuple(checkpoint for checkpoint in self.evaluated() if checkpoint.full_protocol)

    def screen_lines(self) -> list[str]:
        """What the run's screen says of the series beyond its checkpoints' jobs."""
        lines = [f"series {self.name}: {checkpoint.model} has the content of {checkpoint.same_as}; "
                 f"its results stand for it ({checkpoint.path} is not evaluated again)"
                 for checkpoint in self.checkpoints if checkpoint.same_as]
        lines += [f"series {self.name}: {path} passed over: its step field is not an integer" for path in self.passed_over]
        lines += [f"series {self.name}: {path} was written in the last seconds (series.settle_seconds); "
                  f"left for the next run" for path in self.unsettled]
        lines += [f"series {self.name}: full_protocol_steps names step {step}, which the series does not have (yet)"
                  for step in self.unknown_full_steps]
        return lines


# Reading an entry's checkpoints -----------------------------------------------------------


def pattern_parts(name: str, pattern: str) -> tuple[str, str]:
    """The text before and after the pattern's one ``{step}`` field."""
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError as error:
        raise SeriesError(f"config.yaml: model '{name}': checkpoints '{pattern}' is no pattern ({error}); "
                          f"write one {{{STEP_FIELD}}} field where the file names have the step.") from None
    fields = [field_name for _, field_name, _, _ in parsed if field_name is not None]
    if len(fields) != 1 or fields[0] != STEP_FIELD:
        found = ", ".join(f"{{{field_name}}}" for field_name in fields) or "none"
        raise SeriesError(f"config.yaml: model '{name}': checkpoints '{pattern}' needs exactly one field, "
                          f"{{{STEP_FIELD}}} (an integer step in the file names); it has {found}. Or give a "
                          f"{{step: path}} map.")
    position = next(index for index, (_, field_name, _, _) in enumerate(parsed) if field_name is not None)
    before = "".join(literal for literal, _, _, _ in parsed[:position + 1])
    after = "".join(literal for literal, _, _, _ in parsed[position + 1:])
    return before, after


def pattern_checkpoints(name: str, pattern: str) -> tuple[dict[int, str], list[str]]:
    """The pattern's files by step, and the files its glob found whose field is not digits."""
    before, after = pattern_parts(name, pattern)
    matcher = re.compile(re.escape(before) + r"(\d+)" + re.escape(after))
    found: dict[int, str] = {}
    passed_over = []
    for path in sorted(glob.glob(glob.escape(before) + "*" + glob.escape(after))):
        match = matcher.fullmatch(path)
        if match is None:
            passed_over.append(path)
            continue
        step = int(match.group(1))
        if step in found:
            raise SeriesError(f"config.yaml: model '{name}': checkpoints '{pattern}' finds two files of step "
                              f"{step}, {found[step]} and {path}; keep one.")
        found[step] = path
    return found, passed_over


def map_step(name: str, key: Any) -> int:
    """A map's key as a step: an integer (a string of digits from --config too)."""
    if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        return key
    if isinstance(key, str) and key.isdigit():
        return int(key)
    raise SeriesError(f"config.yaml: model '{name}': checkpoints has step {key!r}, which is not a "
                      f"non-negative integer; key each file by its step ({{40: path}}).")


def map_checkpoints(name: str, mapping: Mapping[Any, str]) -> dict[int, str]:
    found: dict[int, str] = {}
    for key, path in mapping.items():
        step = map_step(name, key)
        if step in found:
            raise SeriesError(f"config.yaml: model '{name}': checkpoints names step {step} twice; keep one.")
        found[step] = str(path)
    return found


def under(folder: str | None, path: str) -> str:
    """A relative path under ``checkpoints_dir`` when that is set, as a model's weights; made
    absolute, so that the step's model entry is not put under ``checkpoints_dir`` once more."""
    return os.path.abspath(os.path.join(folder, path)) if folder and not os.path.isabs(path) else path


def listed_checkpoints(name: str, entry: Mapping[str, Any], checkpoints_dir: str | None,
                       made_by_workflow: Collection[str]) -> tuple[dict[int, str], list[str]]:
    """The entry's files by step (a pattern's or a map's) and the files passed over."""
    checkpoints = entry["checkpoints"]
    if isinstance(checkpoints, Mapping):
        found = map_checkpoints(name, checkpoints)
        return {step: path if path in made_by_workflow else under(checkpoints_dir, path)
                for step, path in found.items()}, []
    return pattern_checkpoints(name, under(checkpoints_dir, str(checkpoints)))


def missing_checkpoints(name: str, entry: Mapping[str, Any], files: Mapping[int, str],
                        checkpoints_dir: str | None, made_by_workflow: Collection[str]) -> list[str]:
    """What the run lacks of a series: a pattern matching no file (its folder named), a map's
    step whose file is not there."""
    checkpoints = entry["checkpoints"]
    if not isinstance(checkpoints, Mapping):
        if files:
            return []
        pattern = under(checkpoints_dir, str(checkpoints))
        folder = os.path.dirname(pattern) or "."
        there = "which exists" if os.path.isdir(folder) else "which does not exist"
        return [f"model '{name}': checkpoints '{pattern}' matches no file in {folder} ({there}); "
                f"fix the pattern, or run again once the training run wrote a checkpoint."]
    absent = [(step, path) for step, path in sorted(files.items())
              if path not in made_by_workflow and not os.path.exists(path)]
    if not absent:
        return []
    # one line for the series, however many of its files are not there
    named = ", ".join(f"step {step} ({path})" for step, path in absent[:3])
    more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
    return [f"model '{name}': the checkpoints of {named}{more} are not there; fix their paths or wait for them."]


def settled(path: str, settle_seconds: float, now: float) -> bool:
    """Whether ``path`` was last written at least ``settle_seconds`` ago (a folder: its newest
    file, as a checkpoint folder is written file by file)."""
    written = [os.path.getmtime(path)]
    if os.path.isdir(path):
        written += [entry.stat().st_mtime for entry in os.scandir(path) if entry.is_file()]
    return now - max(written) >= settle_seconds


def full_steps(protocol: SeriesProtocol, steps: list[int]) -> tuple[set[int], tuple[int, ...]]:
    """The steps taking the full protocol, and the named steps the series lacks."""
    named = {steps[-1] if step == LAST_STEP else int(step) for step in protocol.full_protocol_steps
             if step != LAST_STEP or steps}
    return named & set(steps), tuple(sorted(named - set(steps)))


def stand_in_models(entry: Mapping[str, Any], config: Mapping[str, Any], digest: Callable[[str], str], *,
                    own_job_kinds: Collection[str] = (), made_by_workflow: Collection[str] = ()) -> dict[str, str]:
    """The configured models whose results can stand for a checkpoint of the series ``entry``
    with the same content, by that content's identity: a result model of the same network
    (every other key of its entry alike) whose runs cover the series protocol (its N among
    probes.shots, the kinds with jobs of their own, ``own_job_kinds`` (the k-NN), and the
    per-concept accuracy among the model's stages). The usual case: a run's final checkpoint,
    configured as a model of its own, is the series' last step."""
    protocol = SeriesProtocol.of(config["series"], entry.get("series"))
    network = {key: value for key, value in entry.items() if key not in (*SERIES_ENTRY_KEYS, *DESCRIPTIVE_KEYS)}

    def probed_by(kind: str, model: str) -> bool:
        listed = config["probes"]["kind_models"].get(kind)
        return kind in config["probes"]["kinds"] and (listed is None or model in listed)

    concept_models = config["analyses"]["concepts"]["models"] if config["analyses"]["concepts"]["enabled"] else []
    selected = config["results"]["models"]
    stand_ins = {}
    for model, other in config["models"].items():
        weights = str(other.get("weights", ""))
        covered = (
            set(protocol.shots) <= {str(shots) for shots in config["probes"]["shots"]}
            and (not protocol.knn or all(probed_by(kind, model) for kind in own_job_kinds))
            and (not protocol.concepts or concept_models is None or model in concept_models)
            and (selected is None or model in selected)
        )
        same_network = {key: value for key, value in other.items() if key not in ("weights", *DESCRIPTIVE_KEYS)} == network
        if "checkpoints" in other or not covered or not same_network:
            continue
        weights = weights if weights in made_by_workflow else under(config["checkpoints_dir"], weights)
        if weights in made_by_workflow:
            stand_ins.setdefault(weights, model)
        elif os.path.exists(weights):
            try:
                stand_ins.setdefault(digest(weights), model)
            except ValueError:  # a folder without weights: the model's own check refuses it
                continue
    return stand_ins


def expand_series(name: str, entry: Mapping[str, Any], settings: Mapping[str, Any], digest: Callable[[str], str], *,
                  checkpoints_dir: str | None = None, made_by_workflow: Collection[str] = (),
                  now: float | None = None, stand_ins: Mapping[str, str] | None = None) -> tuple[Series, list[str]]:
    """The series of the ``models:`` entry ``name`` (``settings``: the config's ``series``
    section) and what the run lacks of it (messages; the series then has what is there).
    ``digest`` gives a file's content identity (the registry's checkpoint_sha256, as weights
    identities), a ValueError for a checkpoint without content to read (a folder without weights:
    a lack, naming its step); ``stand_ins`` the configured models whose results stand for a
    checkpoint of their content (:func:`stand_in_models`)."""
    now = time.time() if now is None else now
    protocol = SeriesProtocol.of(settings, entry.get("series"))
    files, passed_over = listed_checkpoints(name, entry, checkpoints_dir, made_by_workflow)
    lacks = missing_checkpoints(name, entry, files, checkpoints_dir, made_by_workflow)
    present = {step: path for step, path in files.items() if path in made_by_workflow or os.path.exists(path)}
    unsettled = [path for step, path in sorted(present.items())
                 if path not in made_by_workflow and not settled(path, settings["settle_seconds"], now)]
    kept = {step: path for step, path in sorted(present.items()) if path not in unsettled}
    identities = {}
    for step, path in kept.items():
        try:
            # a workflow-made checkpoint is not there yet: its content is its own
            identities[step] = path if path in made_by_workflow else digest(path)
        except ValueError as error:
            lacks.append(f"model '{name}': step {step}: {error}")
    steps = sorted(identities)
    full, unknown = full_steps(protocol, steps)
    first_of: dict[str, str] = dict(stand_ins or {})
    same_as: dict[int, str | None] = {}
    for step in steps:
        same_as[step] = first_of.get(identities[step])
        first_of.setdefault(identities[step], checkpoint_model(name, step))
    # a full step identical to an earlier one: the earlier step's model takes the full protocol
    full_models = {same_as[step] or checkpoint_model(name, step) for step in full}
    checkpoints = tuple(
        SeriesCheckpoint(step, checkpoint_model(name, step), kept[step], same_as[step],
                         same_as[step] is None and checkpoint_model(name, step) in full_models)
        for step in steps
    )
    series = Series(name, entry["step_unit"], checkpoints, protocol, tuple(passed_over), tuple(unsettled), unknown)
    return series, lacks


def checkpoint_entry(entry: Mapping[str, Any], checkpoint: SeriesCheckpoint) -> dict[str, Any]:
    """The ``models:`` entry of a checkpoint's model: the series entry's arch and other keys,
    the checkpoint file as its weights, its label the series' with the step."""
    own = {key: value for key, value in entry.items() if key not in SERIES_ENTRY_KEYS}
    if own.get("label"):
        own["label"] = f"{own['label']}{STEP_SEPARATOR}{checkpoint.step}"
    return {**own, "weights": checkpoint.path}


# The weights of a series checkpoint on a job's command line ----------------------------------


def series_weights(model: str) -> str:
    """What a job's ``--weights`` says of a series checkpoint: its model, not its path."""
    return f"{SERIES_WEIGHTS_PREFIX}{model}"


def weights_variable(series: Collection[Series]) -> str:
    """The jobs' environment value: every evaluated checkpoint's model and absolute path."""
    return json.dumps({checkpoint.model: os.path.abspath(checkpoint.path)
                       for one in series for checkpoint in one.evaluated()}, sort_keys=True)


def resolve_weights(weights: str, environ: Mapping[str, str] | None = None) -> str:
    """A command's ``--weights``: a series checkpoint's file found in the environment, any other
    setting as it is."""
    if not weights.startswith(SERIES_WEIGHTS_PREFIX):
        return weights
    model = weights[len(SERIES_WEIGHTS_PREFIX):]
    paths = json.loads((os.environ if environ is None else environ).get(WEIGHTS_VARIABLE) or "{}")
    if model not in paths:
        raise SeriesError(f"--weights {weights}: the environment's {WEIGHTS_VARIABLE} names no checkpoint of "
                          f"model {model}; run the job through the workflow, which sets it.")
    return paths[model]


def series_of_model(model: str) -> tuple[str, int] | None:
    """(series, step) of a checkpoint's model name, None for another model."""
    series, separator, step = model.rpartition(STEP_SEPARATOR)
    return (series, int(step)) if separator and step.isdigit() else None

