"""Draw every rule of the workflow, one box per stage's rule file, into docs/rulegraph.svg.

    python scripts/draw_rulegraph.py [--output docs/rulegraph.svg]

No single configuration runs every rule: the demo extracts a shard a job and probes a
dataset a job (extract_features, probe_resident), other groupings run extract_split and
probe_seeds, only real data indexes and checks the roots (index_images, preflight,
pool_concepts), plan and needed_synsets run when asked for by name, and the demo names no
checkpoint series (its baseline's effective_rank file is named instead). So the graph is the
union of Snakemake's ``--rulegraph`` over the VIEWS below, in a scratch copy of the workflow
where the demo has run up to its split tables (the checkpoint after which the features,
probes and results jobs are known). The real-data view names tar layouts over empty roots:
its rules up to the checkpoint need the layout, not an image. Rule ``all``, which gathers
every stage's targets, is left out. Needs graphviz's ``dot`` (Debian: graphviz).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from imagenet_cog.core.layout import Layout

REPOSITORY = Path(__file__).resolve().parents[1]
RULES = REPOSITORY / "workflow" / "rules"
COPIED = ["Snakefile", "config.yaml", "config", "workflow", "resources", "envs"]
# stage order of the Snakefile's includes, and a colour each
STAGES = {
    "levels": "#e8f1fa", "demo": "#f3f3f3", "splits": "#eef7ee", "features": "#fdf3e3", "probes": "#fbe9e9",
    "results": "#f1ebf8", "analyses": "#e9f6f6", "series": "#eef0fa", "variants": "#f8f4e1", "finetune": "#eaf3e8",
    "plan": "#f4f4ec",
}
STAGE_TARGETS = ["levels", "features", "probes", "tables", "figures", "analyses", "raters", "describability", "captions", "finetune",
                 "series_results"]
# the demo names no checkpoint series: RankMe of its baseline model stands for a checkpoint's
DEMO = yaml.safe_load((REPOSITORY / "config.yaml").read_text())
EFFECTIVE_RANK = Layout(DEMO.get("results_dir", "results").rstrip("/")).effective_rank(DEMO["results"]["baseline_model"])
REAL_DATA_ROOTS = {"in21k_layout": "tars", "in1k_layout": "tars", "in21k_root": "roots/in21k", "in1k_root": "roots/in1k"}
# (config files laid over config.yaml, settings laid over them, targets)
VIEWS = [
    ([], {}, ["all", *STAGE_TARGETS, EFFECTIVE_RANK]),
    ([], {"probes": {"group": "shots"}, "features": {"group": "split"}}, ["all"]),
    (["config/imagenet.yaml"], {"data": REAL_DATA_ROOTS}, ["preflight", "needed_synsets", "plan"]),
]


def rule_files() -> dict[str, str]:
    """Rule name -> the stage whose rule file defines it."""
    stage_of = {}
    for stage in STAGES:
        for name in re.findall(r"^\s*(?:rule|checkpoint) (\w+):", (RULES / f"{stage}.smk").read_text(), re.M):
            stage_of[name] = stage
    return stage_of


def snakemake(workdir: Path, *arguments: str) -> str:
    environment = {**os.environ, "PYTHONPATH": str(workdir / "workflow")}
    command = [sys.executable, "-m", "snakemake", "--cores", "1", *arguments]
    return subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True, check=True).stdout


def scratch_copy(workdir: Path) -> Path:
    """The workflow copied into workdir, the demo run up to its split tables, the real-data roots made."""
    for name in COPIED:
        source = REPOSITORY / name
        copy = shutil.copytree if source.is_dir() else shutil.copy2
        copy(source, workdir / name)
    for root in ("in21k_root", "in1k_root"):
        (workdir / REAL_DATA_ROOTS[root]).mkdir(parents=True)
    snakemake(workdir, "--until", "image_splits")
    return workdir


def rule_edges(workdir: Path, configfiles: list[str], settings: dict, targets: list[str]) -> set[tuple[str, str]]:
    """(upstream rule, downstream rule) of one view's rule graph; (rule, rule) for a rule alone."""
    overlay = workdir / "view.yaml"
    overlay.write_text(yaml.safe_dump(settings))
    graph = snakemake(workdir, "--rulegraph", "dot", "--nolock", *targets, "--configfile", *configfiles, str(overlay))
    names = dict(re.findall(r'^\s*(\d+)\[label = "(\w+)"', graph, re.M))
    edges = {(names[source], names[target]) for source, target in re.findall(r"^\s*(\d+) -> (\d+)", graph, re.M)}
    return edges | {(name, name) for name in names.values()}


def dot_source(names: list[str], edges: set[tuple[str, str]]) -> str:
    """One cluster per stage's rule file."""
    stage_of = rule_files()
    lines = ["digraph rules {", '  graph [rankdir=TB, fontname="sans", fontsize=12, nodesep=0.25, ranksep=0.45];',
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="sans", fontsize=9];',
             "  edge [color=grey50, arrowsize=0.6];"]
    for stage, colour in STAGES.items():
        members = [name for name in names if stage_of.get(name) == stage]
        if members:
            lines.append(f'  subgraph cluster_{stage} {{ label="{stage}.smk"; style=filled; color="{colour}";')
            lines += [f"    {name};" for name in members]
            lines.append("  }")
    lines += [f"  {name};" for name in names if name not in stage_of]
    lines += [f"  {source} -> {target};" for source, target in sorted(edges) if source != target and {source, target} <= set(names)]
    return "\n".join(lines + ["}"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default=str(REPOSITORY / "docs" / "rulegraph.svg"), help="svg or png, by its suffix")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rulegraph-") as scratch:
        workdir = scratch_copy(Path(scratch))
        edges = set().union(*(rule_edges(workdir, *view) for view in VIEWS))
    # rule all only gathers every stage's targets: drawn, it would hide the stages' own edges
    names = sorted({name for edge in edges for name in edge} - {"all"})
    source = dot_source(names, edges)
    drawn = subprocess.run(["dot", f"-T{Path(args.output).suffix.lstrip('.')}"], input=source.encode(),
                           capture_output=True, check=True).stdout
    Path(args.output).write_bytes(drawn)
    print(f"{args.output}: {len(names)} rules, {source.count(' -> ')} edges")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
