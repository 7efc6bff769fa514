"""The demo's size, guarded (issue #53): the finished demo's build ran no more jobs than the
ceiling docs/testing.md states, the image-text model ran only on the paths of its own, and
every job started warm (imagenet_cog/warm_start.py).

The count is the build's own: Snakemake's log of the shared demo run (the `demo_run`
fixture), whose last "N of M steps" line counts every job, the extractions that the split
checkpoint adds included. Raising the ceiling is a commit of its own that edits
docs/testing.md with the measurement that justifies it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from conftest import REPOSITORY

CEILING = re.compile(r"job ceiling: \*\*(\d+) jobs\*\*")
STEPS = re.compile(r"^(\d+) of (\d+) steps")
JOB_HEADER = re.compile(r"^\s*(?:local)?(?:rule|checkpoint) (\w+):\s*$")
WILDCARDS = re.compile(r"^\s*wildcards: (.*)$")
# what demo_clip runs in the demo: its extraction, the linear probe on Lin's levels (resident
# jobs), its zero-shot classifiers and probes (the open set too), describability by a model,
# and detection (#56), whose MCM score reads a text tower
CLIP_RULES = {"extract_features", "merge_features", "probe_resident", "zeroshot_classifier", "probe_zeroshot",
              "probe_zeroshot_open_set", "analyses_model_describability", "analyses_detection"}
TEXT_TOWER_RULES = {"zeroshot_classifier", "probe_zeroshot", "probe_zeroshot_open_set", "analyses_model_describability"}


def demo_ceiling() -> int:
    found = CEILING.findall((REPOSITORY / "docs" / "testing.md").read_text())
    assert len(found) == 1, "docs/testing.md states the demo's job ceiling once, as 'job ceiling: **N jobs**'"
    return int(found[0])


def build_log(demo_run: Path) -> str:
    """Snakemake's log of the demo's build: the first of the run's logs (later tests may run
    Snakemake in the finished demo too)."""
    logs = sorted((demo_run / ".snakemake" / "log").glob("*.snakemake.log"))
    assert logs, f"no Snakemake log under {demo_run}"
    return logs[0].read_text()


def build_steps(demo_run: Path) -> int:
    steps = [STEPS.match(line) for line in build_log(demo_run).splitlines()]
    done, total = next((int(m[1]), int(m[2])) for m in reversed(steps) if m)
    assert done == total, f"the demo's build ended at {done} of {total} steps"
    return total


def test_the_demo_runs_within_its_job_ceiling(demo_run):
    total = build_steps(demo_run)
    assert total <= demo_ceiling(), (
        f"the demo ran {total} jobs, over its ceiling of {demo_ceiling()} (docs/testing.md): cut a stage's models "
        "or jobs, or raise the ceiling in a commit of its own with the measurement"
    )


def test_the_image_text_model_runs_only_on_its_own_paths(demo_run):
    rules_by_model = defaultdict(set)
    rule = None
    for line in build_log(demo_run).splitlines():
        header, wildcards = JOB_HEADER.match(line), WILDCARDS.match(line)
        if header:
            rule = header[1]
        elif wildcards and rule:
            values = dict(pair.split("=", 1) for pair in wildcards[1].split(", "))
            if "model" in values:
                rules_by_model[values["model"]].add(rule)
    assert rules_by_model["demo_clip"] == CLIP_RULES
    assert CLIP_RULES - TEXT_TOWER_RULES < rules_by_model["demo_cnn"]


def test_every_job_of_the_demo_started_warm(demo_run):
    """The build's server (the first run's log) forked every job but the target rule
    `all`, which runs no command; a job refused by it would have started cold, unlogged."""
    logs = sorted((demo_run / "results" / "logs" / "warm_start").glob("*.log"))
    assert logs, "the demo's build left no warm-start log"
    build = logs[0].read_text()
    assert "serving" in build.splitlines()[0], build.splitlines()[0]
    served = re.findall(r"^job \d+: (\S+)$", build, re.M)
    assert len(served) == build_steps(demo_run) - 1
    assert {"extract", "probe", "probe-knn", "model-describability"} <= set(served)
