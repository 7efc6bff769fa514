"""Draw the workflow's rule graph, one box per stage's rule file, into docs/rulegraph.svg.

    python scripts/draw_rulegraph.py [--directory DIR] [--output docs/rulegraph.svg]

Snakemake's ``--rulegraph`` (run in DIR, a finished run's folder, so that the rules after
the split tables' checkpoint are in it) gives the rules and their edges; each rule is put
in the cluster of the rule file that defines it and graphviz's ``dot`` lays it out. Rule
``all``, which gathers every stage's targets, is left out.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
RULES = REPOSITORY / "workflow" / "rules"
# stage order of the Snakefile's includes, and a colour each
STAGES = {
    "levels": "#e8f1fa", "demo": "#f3f3f3", "splits": "#eef7ee", "features": "#fdf3e3", "probes": "#fbe9e9",
    "results": "#f1ebf8", "analyses": "#e9f6f6", "variants": "#f8f4e1",
}


def rule_files() -> dict[str, str]:
    """Rule name -> the stage whose rule file defines it."""
    stage_of = {}
    for stage in STAGES:
        for name in re.findall(r"^\s*(?:rule|checkpoint) (\w+):", (RULES / f"{stage}.smk").read_text(), re.M):
            stage_of[name] = stage
    return stage_of


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--directory", default=".", help="where to run Snakemake (a finished run: the whole graph)")
    parser.add_argument("--output", default=str(REPOSITORY / "docs" / "rulegraph.svg"), help="svg or png, by its suffix")
    args = parser.parse_args(argv)
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY / "workflow")}
    graph = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPOSITORY / "Snakefile"), "--rulegraph", "--nolock",
         "--cores", "1"],
        cwd=args.directory, env=environment, capture_output=True, text=True, check=True,
    ).stdout
    # rule all only gathers every stage's targets: drawn, it would hide the stages' own edges
    nodes = {node: name for node, name in re.findall(r'^\s*(\d+)\[label = "(\w+)"', graph, re.M) if name != "all"}
    edges = [(source, target) for source, target in re.findall(r"^\s*(\d+) -> (\d+)", graph, re.M)
             if source in nodes and target in nodes]
    stage_of = rule_files()
    lines = ["digraph rules {", '  graph [rankdir=TB, fontname="sans", fontsize=12, nodesep=0.25, ranksep=0.45];',
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="sans", fontsize=9];',
             "  edge [color=grey50, arrowsize=0.6];"]
    for stage, colour in STAGES.items():
        members = [node for node, name in nodes.items() if stage_of.get(name) == stage]
        if members:
            lines.append(f'  subgraph cluster_{stage} {{ label="{stage}.smk"; style=filled; color="{colour}";')
            lines += [f'    n{node} [label="{nodes[node]}"];' for node in members]
            lines.append("  }")
    lines += [f'  n{node} [label="{name}"];' for node, name in nodes.items() if name not in stage_of]
    lines += [f"  n{source} -> n{target};" for source, target in edges]
    lines.append("}")
    Path(args.output).write_bytes(
        subprocess.run(["dot", f"-T{Path(args.output).suffix.lstrip('.')}"], input="\n".join(lines).encode(), capture_output=True, check=True).stdout
    )
    print(f"{args.output}: {len(nodes)} rules, {len(edges)} edges")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
