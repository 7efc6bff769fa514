"""The configuration checked against its schema before any job, an error told in one screen.

:func:`check_config` validates the merged config against ``workflow/schemas/config.schema.yaml``
with jsonschema, filling in the schema's defaults as it goes (Snakemake's
``validate(..., set_default=True)`` does the same), and refuses the most relevant error
(jsonschema's ``best_match``) in a few lines: the file that set the key, its dotted path, what
is wrong, the allowed values or the nearest known key, and the key's description, never the
schema itself. The files are those Snakemake read, lowest precedence first
(:func:`config_sources`): the last that sets a key (or, for a key none sets, the nearest
enclosing one, such as the model entry of a missing ``arch``) is the one named.

The schema's own keyword ``orderedPair`` marks a ``[low, high]`` setting (a crop's scale range,
a search's learning-rate range): validation refuses one whose low is above its high.
"""

from __future__ import annotations

import copy
import difflib
import textwrap
from pathlib import Path
from typing import Any, Iterable, Sequence

import jsonschema
import yaml

from imagenet_cog.core.failures import ExplainedError

ORDERED_PAIR = "orderedPair"
COMMAND_LINE = "--config"
SHOWN_CHARACTERS = 80
DESCRIPTION_LINES = 4
# libyaml's parser where PyYAML has it (the same documents, ten times faster: the schema is
# read in every Snakemake invocation, every job's on SLURM included)
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
LACKS_SHOWN = 3  # a kind with more lacks is told by its first message and the others' names


class ConfigError(ExplainedError, ValueError):
    """The config breaks its schema; the message names the file, the key and the fix."""


def _fill_defaults(validate_properties):
    def properties(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    # a copy: the schema's own {} and [] must not collect a run's values
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return properties


def _ordered_pair(validator, ordered, instance, schema):
    if ordered and isinstance(instance, list) and len(instance) == 2 and all(
            isinstance(value, (int, float)) for value in instance) and instance[0] > instance[1]:
        yield jsonschema.ValidationError(f"is [{instance[0]}, {instance[1]}]: a [low, high] range whose low is above "
                                         f"its high; write it as [{instance[1]}, {instance[0]}]")


Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {
    "properties": _fill_defaults(jsonschema.Draft202012Validator.VALIDATORS["properties"]),
    ORDERED_PAIR: _ordered_pair,
})


def config_sources(read_files: Sequence[str], command_line_files: Sequence[str],
                   command_line: dict | None = None) -> list[tuple[str, dict]]:
    """``(name, settings)`` of every config file Snakemake read, lowest precedence first: the
    workflow's own (``configfile:``), then the ``--configfile`` files in their order, then
    ``--config`` values. ``read_files`` is ``workflow.configfiles``, ``command_line_files``
    ``workflow.overwrite_configfiles``."""
    command_line_files = [str(path) for path in command_line_files]
    own = [str(path) for path in read_files if str(path) not in command_line_files]
    sources = []
    for path in [*own, *command_line_files]:
        try:
            settings = read_yaml(path) or {}
        except (OSError, yaml.YAMLError):
            continue  # Snakemake itself reports a file it cannot read
        if isinstance(settings, dict):
            sources.append((path, settings))
    if command_line:
        sources.append((COMMAND_LINE, command_line))
    return sources


def _sets(settings: Any, path: Sequence) -> bool:
    for key in path:
        if isinstance(settings, dict) and key in settings:
            settings = settings[key]
        elif isinstance(settings, list) and isinstance(key, int) and key < len(settings):
            settings = settings[key]
        else:
            return False
    return True


def source_of(path: Sequence, sources: Sequence[tuple[str, dict]]) -> str | None:
    """The last file that sets ``path`` (a key path), else the last that sets the nearest
    key enclosing it; None when only the schema's defaults do."""
    for length in range(len(path), 0, -1):
        for name, settings in reversed(sources):
            if _sets(settings, path[:length]):
                return name
    return None


def with_source(message: str, path: Sequence, sources: Sequence[tuple[str, dict]]) -> str:
    """A message that names ``config.yaml`` as the file setting ``path`` (as the model
    registry's do) naming the file that does set it: an overlay's model is the overlay's."""
    source = source_of(path, sources)
    prefix = "config.yaml: "
    return f"{source}: {message[len(prefix):]}" if source and message.startswith(prefix) else message


def dotted(path: Iterable) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text or "(the top level)"


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else yaml.safe_dump(value, default_flow_style=True).strip()
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS - 3] + "..."


def _described(schema: dict) -> list[str]:
    description = " ".join(str(schema.get("description", "")).split())
    if not description:
        return []
    lines = textwrap.wrap(description, 96, initial_indent="  it is: ", subsequent_indent="    ")
    return lines[:DESCRIPTION_LINES] + (["    ..."] if len(lines) > DESCRIPTION_LINES else [])


def _unknown_keys(error: jsonschema.ValidationError) -> list[str]:
    known = set(error.schema.get("properties", {}))
    return [key for key in error.instance if key not in known] if isinstance(error.instance, dict) else []


def _problem(error: jsonschema.ValidationError) -> tuple[list, list[str]]:
    """The key path an error is about, and the lines saying what is wrong there."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and _unknown_keys(error):
        unknown = _unknown_keys(error)[0]
        known = sorted(error.schema.get("properties", {}))
        lines = [f"unknown key '{unknown}'"]
        nearest = difflib.get_close_matches(unknown, known, n=1, cutoff=0.6)
        if nearest:
            lines.append(f"  did you mean '{nearest[0]}'?")
        if known:
            lines += textwrap.wrap(", ".join(known), 96, initial_indent=f"  keys allowed in {dotted(path)}: ",
                                   subsequent_indent="    ")
        return [*path, unknown], lines
    if error.validator == "enum":
        allowed = ", ".join(_shown(value) for value in error.validator_value)
        lines = [f"is {_shown(error.instance)}; allowed: {allowed}"]
        nearest = difflib.get_close_matches(str(error.instance), [str(value) for value in error.validator_value],
                                            n=1, cutoff=0.6)
        return path, lines + ([f"  did you mean '{nearest[0]}'?"] if nearest else [])
    if error.validator == "required":
        missing = next((key for key in error.validator_value if key not in error.instance), "?")
        return [*path, missing], ["is required but not set"]
    if error.validator == ORDERED_PAIR:
        return path, [error.message]
    if error.validator == "type":
        expected = error.validator_value if isinstance(error.validator_value, str) else " or ".join(error.validator_value)
        return path, [f"is {_shown(error.instance)} ({type(error.instance).__name__}); expected {expected}"]
    if error.validator in ("oneOf", "anyOf") and error.context:
        reasons = sorted({context.message for context in error.context if not context.absolute_path})
        return path, [f"is {_shown(error.instance)}, which is none of what it may be:"] + [
            f"  {_shown_message(reason)}" for reason in reasons[:4]]
    return path, [f"is {_shown(error.instance)}: {_shown_message(error.message)}"]


def _shown_message(message: str) -> str:
    return message if len(message) <= 2 * SHOWN_CHARACTERS else message[:2 * SHOWN_CHARACTERS - 3] + "..."


def _schema_at(schema: dict, path: Sequence) -> dict:
    """The schema of the key at ``path`` (for its description), as far as properties lead."""
    node = schema
    for key in path:
        properties = node.get("properties", {})
        if isinstance(key, str) and key in properties:
            node = properties[key]
        elif isinstance(key, str) and isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif isinstance(key, int) and isinstance(node.get("items"), dict):
            node = node["items"]
        else:
            return {}
    return node


def describe(error: jsonschema.ValidationError, schema: dict, sources: Sequence[tuple[str, dict]]) -> str:
    path, lines = _problem(error)
    source = source_of(path, sources) or "the schema's default"
    described = _described(_schema_at(schema, path)) if error.validator != "additionalProperties" else []
    return "\n".join([f"{source}: {dotted(path)} {lines[0]}", *lines[1:], *described,
                      "(every key, its type and default: workflow/schemas/config.schema.yaml)"])


def check_config(config: dict, schema: dict, sources: Sequence[tuple[str, dict]] = ()) -> dict:
    """Fill the schema's defaults into ``config`` and return it; refuse it with a
    :class:`ConfigError` of a few lines when it breaks the schema."""
    error = jsonschema.exceptions.best_match(Validator(schema).iter_errors(config))
    if error is not None:
        raise ConfigError(describe(error, schema, sources))
    return config


def lacking_message(lacks: dict[str, list[tuple[str, str]]], pricing: str) -> str:
    """What a run lacks, all of it in one message of a few lines: per kind (image roots,
    checkpoints, ...) ``(name, message)`` pairs; a kind with many is told by its first message
    and the names of the rest. ``pricing``: the targets that work without them."""
    count = sum(len(found) for found in lacks.values())
    lines = [f"This run lacks {count} thing{'s' if count > 1 else ''} it needs; no job was started "
             f"({pricing} work without them):"]
    for kind, found in lacks.items():
        lines.append(f"{kind} ({len(found)}):")
        shown = found if len(found) <= LACKS_SHOWN else found[:1]
        lines += [f"  {message}" for _, message in shown]
        if len(found) > len(shown):
            rest = ", ".join(name for name, _ in found[len(shown):])
            lines += textwrap.wrap(rest, 96, initial_indent=f"  and {len(found) - len(shown)} more like it: ",
                                   subsequent_indent="    ")
    return "\n".join(lines)


def read_yaml(path: str | Path) -> Any:
    return yaml.load(Path(path).read_text(), Loader=YAML_LOADER)


def load_schema(path: str | Path) -> dict:
    return read_yaml(path)
