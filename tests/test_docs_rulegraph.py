"""docs/rulegraph.svg, which docs/architecture.md shows as every rule of the workflow, holds
every rule Snakemake knows under the configurations that define different rules: the demo,
config/imagenet.yaml, and each job grouping of the features and the probes."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import yaml

from conftest import REPOSITORY, copy_workflow, snakemake

SCHEMA = yaml.safe_load((REPOSITORY / "workflow" / "schemas" / "config.schema.yaml").read_text())
# rule all only gathers every stage's targets; scripts/draw_rulegraph.py leaves it out on purpose
NOT_DRAWN = {"all"}


def grouping_overlays() -> list[dict]:
    """Every value of features.group and of probes.group, in as few configs as covers them."""
    stages = ("features", "probes")
    values = [SCHEMA["properties"][stage]["properties"]["group"]["enum"] for stage in stages]
    pairs = itertools.zip_longest(*values, fillvalue=None)
    return [{stage: {"group": value} for stage, value in zip(stages, pair) if value} for pair in pairs]


def known_rules(workdir: Path, *configfiles: str) -> set[str]:
    listed = snakemake(workdir, "--list-rules", "--cores", "1", *(["--configfile", *configfiles] if configfiles else []))
    return {line.strip() for line in listed.stdout.splitlines() if re.fullmatch(r"\s*\w+\s*", line)}


def drawn_rules() -> set[str]:
    svg = (REPOSITORY / "docs" / "rulegraph.svg").read_text()
    return {text for text in re.findall(r"<text[^>]*>([^<]+)</text>", svg) if not text.endswith(".smk")}


def test_the_rule_graph_shows_every_rule(tmp_path):
    workdir = copy_workflow(tmp_path / "copy")
    rules = known_rules(workdir) | known_rules(workdir, str(REPOSITORY / "config" / "imagenet.yaml"))
    for number, overlay in enumerate(grouping_overlays()):
        (workdir / f"grouping-{number}.yaml").write_text(yaml.safe_dump(overlay))
        rules |= known_rules(workdir, f"grouping-{number}.yaml")
    assert {"extract_split", "probe_seeds", "probe_resident", "index_images", "plan"} <= rules
    missing = sorted(rules - NOT_DRAWN - drawn_rules())
    assert missing == [], f"docs/rulegraph.svg lacks {missing}: python scripts/draw_rulegraph.py redraws it"
