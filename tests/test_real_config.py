"""config/imagenet.yaml runs the paper's main protocol and sets back every setting the demo's
config.yaml shrinks; each add-on file laid over it switches on its part alone."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from imagenet_cog.core.config_check import ConfigError, check_config, config_sources, load_schema

REPOSITORY = Path(__file__).resolve().parents[1]
SCHEMA = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"
MAIN = "config/imagenet.yaml"
# each add-on file and the top-level sections it may change
ADD_ONS = {"config/level_sets.yaml": {"level_sets"}, "config/balanced.yaml": {"balanced"},
           "config/label_audit.yaml": {"label_audit"}, "config/finetune.yaml": {"finetune"},
           "config/analyses.yaml": {"analyses"}}
ANALYSES = ("kmeans", "agreement", "alignment_uniformity", "learnability", "detection", "concepts")
# demo: read only in demo mode; models: the real config replaces the demo's networks
DEMO_ONLY_SECTIONS = {"demo", "models"}
MISSING = object()


def leaves(mapping: dict, prefix: tuple = ()):
    """(key path, value) of every setting that is not itself a non-empty mapping."""
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def lookup(mapping: dict, path: tuple):
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return MISSING
        mapping = mapping[key]
    return mapping


def schema_default(schema: dict, path: tuple):
    for key in path:
        schema = schema.get("properties", {}).get(key)
        if schema is None:
            return MISSING
    return schema.get("default", MISSING)


def read(name: str) -> dict:
    return yaml.safe_load((REPOSITORY / name).read_text())


def merged(*files: str) -> dict:
    """config.yaml with the files laid over it as Snakemake lays --configfile files, validated
    with the schema's defaults filled in."""
    config = read("config.yaml")
    for name in files:
        update_config(config, read(name))
    config["models"] = {name: entry for name, entry in config["models"].items() if entry is not None}
    return check_config(config, load_schema(SCHEMA))


def test_the_real_config_and_its_add_ons_set_back_what_the_demo_shrinks():
    demo = read("config.yaml")
    layers = [read(name) for name in (MAIN, *ADD_ONS)]
    schema = load_schema(SCHEMA)
    kept_from_demo = [
        ".".join(path)
        for path, value in leaves(demo)
        if path[0] not in DEMO_ONLY_SECTIONS
        and all(lookup(layer, path) is MISSING for layer in layers)
        and schema_default(schema, path) != value
    ]
    assert kept_from_demo == [], f"config/imagenet.yaml and its add-ons keep the demo's value of {kept_from_demo}"


def switched_on(config: dict) -> set[str]:
    """The sections beyond the main protocol that a validated config runs."""
    return ({"level_sets"} if config["level_sets"]["sets"] else set()) | {
        section for section in ("balanced", "label_audit", "finetune", "in1k_blurred") if config[section]["enabled"]
    } | ({"analyses"} if any(config["analyses"][name]["enabled"] for name in ANALYSES) else set())


def test_the_main_file_runs_the_main_protocol_and_each_add_on_its_part_alone():
    main = merged(MAIN)
    assert switched_on(main) == set()
    assert main["probes"]["kinds"] == ["linear"] and main["datasets"] == ["in1k", "l1", "l2", "l3", "l4", "l5"]
    configs = {add_on: merged(MAIN, add_on) for add_on in ADD_ONS}
    for add_on, sections in ADD_ONS.items():
        assert switched_on(configs[add_on]) == sections, add_on
        changed = {key for key in configs[add_on] if configs[add_on][key] != main[key]}
        assert changed == sections, add_on
    level_sets = configs["config/level_sets.yaml"]["level_sets"]
    assert level_sets["sets"] == ["wup", "path", "jcn", "res", "random"] and level_sets["random"]["draws"] == 15
    assert configs["config/balanced.yaml"]["balanced"]["train_per_concept"] == 732


def test_a_setting_is_told_by_the_file_that_sets_it():
    files = [str(REPOSITORY / name) for name in (MAIN, "config/level_sets.yaml")]
    sources = config_sources([str(REPOSITORY / "config.yaml"), *files], files)
    assert [name for name, _ in sources] == [str(REPOSITORY / "config.yaml"), *files]
    config = merged(MAIN, "config/level_sets.yaml")
    config["level_sets"]["random"]["draws"] = 0
    with pytest.raises(ConfigError, match=r"config/level_sets\.yaml: level_sets\.random\.draws"):
        check_config(copy.deepcopy(config), load_schema(SCHEMA), sources)
    config["level_sets"]["random"]["draws"] = 15
    config["probes"]["trials"] = 0
    with pytest.raises(ConfigError, match=r"config/imagenet\.yaml: probes\.trials"):
        check_config(config, load_schema(SCHEMA), sources)
