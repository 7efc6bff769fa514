"""The config check (imagenet_cog.core.config_check): defaults filled as Snakemake's validate
fills them, an error told in a few lines naming the file that set the key, every [low, high]
pair of the schema checked, what a run lacks told once, and a refused dry run within one screen."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from conftest import REPOSITORY, copy_workflow, refused_overlay, snakemake
from imagenet_cog.core.config_check import (
    ORDERED_PAIR,
    ConfigError,
    check_config,
    config_sources,
    lacking_message,
    load_schema,
    source_of,
)

SCHEMA_PATH = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"
SCREEN = 25


@pytest.fixture(scope="module")
def schema() -> dict:
    return load_schema(SCHEMA_PATH)


def demo_config() -> dict:
    config = yaml.safe_load((REPOSITORY / "config.yaml").read_text())
    config["models"] = {name: entry for name, entry in config["models"].items() if entry is not None}
    return config


def refused(config: dict, schema: dict, sources=()) -> str:
    with pytest.raises(ConfigError) as failure:
        check_config(config, schema, sources)
    return str(failure.value)


def test_defaults_are_filled_as_snakemakes_validate_fills_them(schema):
    ours, snakemakes = demo_config(), demo_config()
    check_config(ours, schema)
    validate(snakemakes, str(SCHEMA_PATH))
    assert ours == snakemakes
    # the schema's own defaults are not changed by a run's values
    check_config({"probes": {"seeds": [1]}}, schema)
    again = {}
    check_config(again, schema)
    assert again["probes"]["seeds"] == load_schema(SCHEMA_PATH)["properties"]["probes"]["properties"]["seeds"]["default"]


def test_an_unknown_key_names_its_file_the_nearest_key_and_the_allowed_ones(schema, tmp_path):
    base, overlay = tmp_path / "config.yaml", tmp_path / "overlay.yaml"
    base.write_text(yaml.safe_dump({"probes": {"trials": 5}}))
    overlay.write_text(yaml.safe_dump({"probes": {"trails": 3}}))
    sources = config_sources([str(overlay), str(base)], [str(overlay)])
    assert [name for name, _ in sources] == [str(base), str(overlay)]  # lowest precedence first
    message = refused({"probes": {"trials": 5, "trails": 3}}, schema, sources)
    lines = message.splitlines()
    assert lines[0] == f"{overlay}: probes.trails unknown key 'trails'"
    assert lines[1] == "  did you mean 'trials'?"
    assert "keys allowed in probes: " in message and "seeds" in message
    assert len(lines) <= 8 and "additionalProperties" not in message
    top = refused({"modles": {}}, schema, [("config.yaml", {"modles": {}})])
    assert top.startswith("config.yaml: modles unknown key 'modles'\n  did you mean 'models'?")


def test_a_wrong_value_says_what_is_allowed_and_what_the_key_is(schema):
    message = refused({"features": {"decode": "hots"}}, schema, [("mine.yaml", {"features": {"decode": "hots"}})])
    assert message.startswith("mine.yaml: features.decode is 'hots'; allowed: 'auto', 'host', 'device'\n"
                              "  did you mean 'host'?\n  it is: where JPEGs are decoded")
    typed = refused({"probes": {"trials": "many"}}, schema, [("mine.yaml", {"probes": {"trials": "many"}})])
    assert typed.startswith("mine.yaml: probes.trials is 'many' (str); expected integer")
    below = refused({"probes": {"seeds": [1, -2]}}, schema)
    assert below.startswith("the schema's default: probes.seeds[1] is -2: -2 is less than the minimum of 0")


def test_a_models_error_names_the_file_that_defines_the_model(schema):
    sources = [("config.yaml", {"models": {"demo_cnn": {"arch": "demo_cnn"}}}),
               ("config/mine.yaml", {"models": {"mine": {"weights": "x.pt"}}})]
    message = refused({"models": {"demo_cnn": {"arch": "demo_cnn"}, "mine": {"weights": "x.pt"}}}, schema, sources)
    assert message.startswith("config/mine.yaml: models.mine.arch is required but not set")
    # a key no file sets is named with the file of the nearest key enclosing it
    assert source_of(["models", "mine", "factory"], sources) == "config/mine.yaml"
    assert source_of(["models", "demo_cnn", "arch"], sources) == "config.yaml"
    assert source_of(["probes", "seeds"], sources) is None


def pairs(node, path=()):
    """Every schema node of a two-number array: (key path, whether it is marked as a pair)."""
    if isinstance(node, dict):
        items = node.get("items")
        if node.get("type") == "array" and node.get("minItems") == node.get("maxItems") == 2 and isinstance(
                items, dict) and items.get("type") in ("number", "integer"):
            yield path, node.get(ORDERED_PAIR)
        for key, value in node.get("properties", {}).items():
            yield from pairs(value, (*path, key))
        for keyword in ("additionalProperties", "items"):
            if isinstance(node.get(keyword), dict):
                yield from pairs(node[keyword], (*path, "*"))


def test_every_two_number_setting_of_the_schema_says_whether_it_is_a_low_high_pair(schema):
    found = list(pairs(schema))
    assert len(found) >= 7  # lr_range, wd_range, the MLP's three ranges, crop_scale, crop_ratio
    unmarked = [".".join(path) for path, marked in found if marked is None]
    assert unmarked == [], f"mark these with {ORDERED_PAIR}: true ([low, high]) or false in the schema"


def test_every_pair_with_its_low_above_its_high_is_refused_before_any_job(schema):
    for path, marked in pairs(schema):
        if not marked or "*" in path:
            continue
        config = {}
        section = config
        for key in path[:-1]:
            section = section.setdefault(key, {})
        default = copy.deepcopy(_schema_node(schema, path)["default"])
        section[path[-1]] = [default[1], default[0]] if default[0] != default[1] else [default[0] * 2, default[0]]
        message = refused(config, schema, [("overlay.yaml", config)])
        assert message.startswith(f"overlay.yaml: {'.'.join(path)} is ["), message
        assert "whose low is above its high" in message


def _schema_node(schema, path):
    for key in path:
        schema = schema["properties"][key]
    return schema


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("config-check") / "workflow")


@pytest.mark.parametrize("settings, expected", [
    ({"probes": {"trails": 3}}, "probes.trails unknown key 'trails'"),
    ({"modles": {"mine": {"arch": "resnet50"}}}, "did you mean 'models'?"),
    ({"finetune": {"recipe": {"crop_scale": [1.0, 0.35]}}}, "finetune.recipe.crop_scale is [1.0, 0.35]"),
    ({"models": {"mine": {"weights": "x.pt"}}}, "overlay.yaml: models.mine.arch is required but not set"),
])
def test_a_refused_dry_run_is_one_screen(workflow_copy, settings, expected):
    output = refused_overlay(workflow_copy, settings)
    assert expected in output
    assert len(output.splitlines()) <= SCREEN, output
    assert "schema['properties']" not in output


def test_an_overlays_model_is_named_with_the_overlay_in_the_registrys_messages(workflow_copy):
    output = refused_overlay(workflow_copy, {"models": {"mine": {"arch": "resnet5O"}}}, name="mine.yaml")
    assert "mine.yaml: model 'mine' has unknown arch 'resnet5O'" in output and "config.yaml: model" not in output
    assert len(output.splitlines()) <= SCREEN, output


def test_what_a_run_lacks_is_told_once_all_together_before_any_job(workflow_copy, tmp_path):
    nowhere = tmp_path / "nowhere"
    lacking = {
        "mode": "imagenet",
        "data": {"in21k_root": str(nowhere / "in21k"), "in1k_root": str(nowhere / "in1k")},
        "levels": {"source": "published", "published_levels": str(nowhere / "levels.pkl")},
        "level_sets": {"sets": ["word2vec"], "word2vec": {"embeddings": str(nowhere / "vectors.txt")}},
        "models": {"mine": {"arch": "resnet50", "weights": str(nowhere / "mine.pt")}},
        "probes": {"zeroshot": {"names": {"l1": str(nowhere / "names.tsv")}}},
    }
    output = refused_overlay(workflow_copy, lacking, name="lacking.yaml")
    assert len(output.splitlines()) <= SCREEN, output
    assert "no job was started" in output and "Building DAG" not in output
    for missing in ("mine.pt", "in21k'", "in1k'", "levels.pkl", "vectors.txt", "names.tsv"):
        assert output.count(missing) == 1, (missing, output)
    assert "lacking.yaml: model 'mine'" in output
    # pricing a run comes before downloading its images and checkpoints
    before_downloads = {key: lacking[key] for key in ("mode", "data", "models")}
    (workflow_copy / "before.yaml").write_text(yaml.safe_dump(before_downloads))
    for target in ("plan", "needed_synsets"):
        assert snakemake(workflow_copy, target, "--dry-run", "--cores", "1", "--configfile", "before.yaml").returncode == 0
    # the demo's network, its pretraining's checkpoints (one line for the series) and mine
    assert "checkpoints (3)" in refused_overlay(workflow_copy, before_downloads)


def test_many_lacks_of_one_kind_are_told_by_the_first_and_the_others_names():
    lacks = {"checkpoints": [(f"model{number}", f"model{number}'s checkpoint is missing") for number in range(30)],
             "image roots": [("data.in1k_root", "data.in1k_root is missing")]}
    message = lacking_message(lacks, "`snakemake plan`")
    assert message.splitlines()[:3] == [
        "This run lacks 31 things it needs; no job was started (`snakemake plan` work without them):",
        "checkpoints (30):", "  model0's checkpoint is missing"]
    assert "and 29 more like it: model1, model2" in message and "model29" in message
    assert message.endswith("image roots (1):\n  data.in1k_root is missing") and len(message.splitlines()) <= 8


def test_a_names_table_naming_two_concepts_alike_is_refused_at_planning(workflow_copy, tmp_path):
    table = tmp_path / "names-l1.tsv"
    table.write_text("label\twnid\tname\n0\tn01521399\trhea\n1\tn01521756\tRhea\n2\tn02012849\tcrane\n")
    output = refused_overlay(workflow_copy, {"probes": {"zeroshot": {"names": {"l1": str(table)}}}})
    assert f"{table}: 1 name given to several concepts ('rhea' on lines 2, 3)" in output
    assert "edit the names" in output and len(output.splitlines()) <= SCREEN


def test_a_value_set_on_the_command_line_is_named_as_such(schema, tmp_path):
    base = tmp_path / "config.yaml"
    base.write_text(yaml.safe_dump({"mode": "demo"}))
    sources = config_sources([str(base)], [], {"mode": "demos"})
    assert refused({"mode": "demos"}, schema, sources).startswith(
        "--config: mode is 'demos'; allowed: 'demo', 'imagenet'\n  did you mean 'demo'?")


def test_a_dataset_outside_the_levels_names_the_file_that_lists_it(workflow_copy):
    output = refused_overlay(workflow_copy, {"datasets": ["l1", "l9"]}, name="nine.yaml")
    assert "nine.yaml: dataset 'l9' is not IN-1K or one of the 5 levels" in output
    assert len(output.splitlines()) <= SCREEN


def test_a_names_table_of_another_dataset_is_refused_at_planning_once_the_concepts_are_listed(tmp_path):
    copy = copy_workflow(tmp_path / "workflow")
    lists = {"l1": ["n01521399", "n01521756", "n02012849"], "l2": ["n02013177", "n02017213", "n02018027"]}
    for dataset, wnids in lists.items():  # what the demo world (the levels stage on real data) lists
        (copy / "results" / "demo" / "concepts").mkdir(parents=True, exist_ok=True)
        (copy / "results" / "demo" / "concepts" / f"{dataset}.txt").write_text("\n".join(wnids) + "\n")
    table = tmp_path / "l2.tsv"
    table.write_text("label\twnid\tname\n" + "".join(f"{n}\t{w}\tname {n}\n" for n, w in enumerate(lists["l2"])))
    output = refused_overlay(copy, {"probes": {"zeroshot": {"names": {"l1": str(table)}}}})
    assert f"{table}: 3 of its 3 wnids are not concepts of l1 (3 of them l2's); it leaves out 3 of the 3" in output
    assert "point probes.zeroshot.names.l1 at one" in output and "Building DAG" not in output
    assert len(output.splitlines()) <= SCREEN, output


def test_a_pretraining_data_naming_an_unknown_dataset_is_refused_with_the_catalogues_names(workflow_copy):
    """Before any job, in one screen naming the overlay that set it and every dataset the catalogue
    (resources/pretraining_datasets.tsv) has."""
    output = refused_overlay(workflow_copy, {"models": {"demo_cnn_random": {"pretraining_data": ["in1k", "IN-22k"]}}},
                             name="data.yaml")
    assert "data.yaml: model 'demo_cnn_random': pretraining_data names 'IN-22k'" in output
    assert all(name in output for name in ("in1k", "in21k-images", "lvd142m", "wit400m", "mc2b"))
    assert len(output.splitlines()) <= SCREEN, output
    assert "Building DAG" not in output and "Traceback" not in output
