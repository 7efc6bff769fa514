"""The leaderboard's commands.

* ``results-leaderboard`` (rule ``leaderboard``): a run's leaderboard from its tables and the
  paper's published top-1 (:mod:`.leaderboard_cells`), ranked (:mod:`.leaderboard_ranks`), written
  (:mod:`.leaderboard_page`) under the run's results folder.
* ``leaderboard RESULTS...``: the leaderboards of several runs' results folders merged into one
  (their tables, samples and protocols re-ranked together) under ``--output``. The first
  folder's protocol is the reference: a reproduced row of another protocol is left out and
  named, or with ``--keep-other-protocols`` kept, marked and ranked among its own protocol's
  rows. The paper's published rows appear once.

Each protocol's models are ranked within their exposure class (what their pretraining saw of the
levels' concepts, :mod:`imagenet_cog.models.pretraining`) and, in the ``*_all`` columns, all together.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from imagenet_cog.core.command_line import setup_logging
from imagenet_cog.core.layout import LEADERBOARD_NAME, LEADERBOARD_PROTOCOLS, LEADERBOARD_SAMPLES, LEADERBOARD_STACKS, Layout
from imagenet_cog.core.naming import is_level
from imagenet_cog.models.pretraining import read_pretraining_json
from imagenet_cog.results.leaderboard_cells import (
    CELL_COLUMNS,
    MODEL_COLUMNS,
    PUBLISHED,
    SAMPLE_COLUMNS,
    concept_samples,
    detection_cells,
    drop_cells,
    model_rows,
    off_grid_cells,
    published_rows,
    run_datasets,
    slope_cells,
    top1_cells,
    with_published,
)
from imagenet_cog.results.leaderboard_page import write_leaderboard
from imagenet_cog.results.leaderboard_ranks import ALL_RANK_COLUMNS, RANK_COLUMNS, with_class_ranks
from imagenet_cog.results.protocol import PAPER_DIGEST, PAPER_PROTOCOL, digest
from imagenet_cog.results.published import read_published
from imagenet_cog.results.summary import lin_rows, read_probe_result, read_seed_results, read_summary

DEFAULT_OUTPUT = "leaderboard"


def analysis_cells(args: argparse.Namespace, levels: list[str]) -> tuple[list[dict], list[dict]]:
    """The cells and samples of the analyses' and off-grid kinds' files the run has."""
    cells, samples = [], []
    if args.concepts:
        samples += concept_samples(pd.read_csv(args.concepts, dtype={"wnid": str}), levels)
    if args.concept_curve:
        cells += slope_cells(pd.read_csv(args.concept_curve))
    if args.detection_seeds:
        detection = pd.concat([pd.read_csv(path, sep="\t", dtype={"seed": str}) for path in args.detection_seeds])
        found, drawn = detection_cells(detection, args.detection_score)
        cells, samples = cells + found, samples + drawn
    return cells + off_grid_cells(args.off_grid_results), samples


def run_stacks(root: str, seeds: pd.DataFrame) -> list[dict]:
    """The releases the run's probe results (``seeds``' rows) were computed with, as each result
    records them (``versions``): every distinct stack with its number of results, the most first."""
    layout, counts = Layout(root), {}
    for row in seeds.itertuples():
        result = read_probe_result(Path(layout.probe_result(row.model, row.dataset, row.shots, row.seed, row.probe)))
        stack = json.dumps(result.get("versions", {}), sort_keys=True)
        counts[stack] = counts.get(stack, 0) + 1
    return [{"results": count, "versions": json.loads(stack)}
            for stack, count in sorted(counts.items(), key=lambda item: -item[1])]


def run_leaderboard(args: argparse.Namespace) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """(models, cells, samples, datasets) of one run beside the paper's published rows."""
    configured, protocol = json.loads(args.models), digest(json.loads(args.protocol))
    summary = lin_rows(read_summary(args.summary))
    datasets = run_datasets(summary)
    levels = [dataset for dataset in datasets if is_level(dataset)]
    summary = summary[summary["dataset"].isin(datasets)]
    seeds = read_seed_results(args.seed_results)
    seeds = seeds[seeds["dataset"].isin(datasets)]
    cells, samples = top1_cells(summary, seeds)
    if levels:
        found, drawn = drop_cells(seeds, levels[0], levels[-1])
        cells, samples = cells + found, samples + drawn
    found, drawn = analysis_cells(args, levels)
    published = read_published(args.published)
    pretraining, paper_pretraining = read_pretraining_json(args.pretraining)
    paper_models, paper_cells = published_rows(published, datasets, paper_pretraining)
    cells = with_published(pd.DataFrame(cells + found, columns=CELL_COLUMNS[:-2]), published, configured)
    cells = pd.concat([cells, pd.DataFrame(paper_cells)], ignore_index=True)
    models = pd.concat([model_rows(summary, configured, protocol, pretraining), paper_models], ignore_index=True)
    return models, cells, pd.DataFrame(samples + drawn, columns=SAMPLE_COLUMNS), datasets


def ranked(models: pd.DataFrame, cells: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    return with_class_ranks(cells[cells["model"].isin(models["model"])], samples, models)


def run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog results-leaderboard", description=__doc__.split("\n")[0])
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--seed-results", required=True)
    parser.add_argument("--published", required=True, help="resources/published_top1.tsv")
    parser.add_argument("--models", required=True, help="JSON: the config entries of the result models")
    parser.add_argument("--protocol", required=True, help="JSON: the run's protocol (results.protocol.run_protocol)")
    parser.add_argument("--pretraining", required=True,
                        help="JSON: each model's and published model's pretraining data and exposure "
                             "(imagenet_cog.models.pretraining.pretraining_json)")
    parser.add_argument("--concepts", help="tables/concepts.csv (analyses.concepts)")
    parser.add_argument("--concept-curve", help="tables/concept_curve.csv")
    parser.add_argument("--detection-seeds", nargs="*", default=[], help="analyses/<model>/detection_seeds.tsv")
    parser.add_argument("--detection-score", default="msp")
    parser.add_argument("--off-grid-results", nargs="*", default=[], help="the result JSONs of the kinds off the grid")
    return parser


def results_leaderboard_command(argv: list[str]) -> int:
    args = run_parser().parse_args(argv)
    setup_logging()
    models, cells, samples, datasets = run_leaderboard(args)
    protocol = digest(json.loads(args.protocol))
    protocols = {protocol: json.loads(args.protocol), PAPER_DIGEST: PAPER_PROTOCOL}
    stacks = {protocol: run_stacks(args.results_root, read_seed_results(args.seed_results))}
    levels = [dataset for dataset in datasets if is_level(dataset)]
    write_leaderboard(Layout(args.results_root), models, ranked(models, cells, samples), samples, protocols, stacks,
                      protocol, datasets, levels)
    shown = (models["provenance"] != PUBLISHED).sum()
    print(f"{shown} models of the run beside {len(models) - shown} published, protocol {protocol}"
          + ("" if protocol == PAPER_DIGEST else f" (the paper's: {PAPER_DIGEST}, ranked apart)"))
    return 0


def read_run(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict]:
    """(long table, samples, protocols, stacks) of a results folder's leaderboard."""
    layout = Layout(str(folder).rstrip("/"))
    paths = [Path(layout.table(LEADERBOARD_NAME, "csv")), Path(layout.table(LEADERBOARD_SAMPLES, "csv")),
             Path(layout.table(LEADERBOARD_PROTOCOLS, "json"))]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise SystemExit(f"{folder}: no {', '.join(missing)}; make its leaderboard first (snakemake "
                         f"{layout.leaderboard_page()} with that run's config), or leave the folder out.")
    long = pd.read_csv(paths[0], dtype={"shots": str, "protocol": str, "paper_name": str, "pretraining_data": str})
    if "exposure" not in long.columns:
        raise SystemExit(f"{folder}: its {paths[0].name} has no exposure column (written before the leaderboard "
                         f"ranked by exposure); make it again (snakemake {layout.leaderboard_page()} with that run's "
                         f"config), or leave the folder out.")
    samples = pd.read_csv(paths[1], dtype={"shots": str, "key": str})
    protocols = json.loads(paths[2].read_text())
    stacks = Path(layout.table(LEADERBOARD_STACKS, "json"))
    return long.fillna({"paper_name": ""}), samples, protocols, json.loads(stacks.read_text()) if stacks.is_file() else {}


def merged(folders: list[Path], keep_other: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict, dict, str, list]:
    """(models, cells, samples, protocols, stacks, reference, left out) of the runs' leaderboards."""
    models, cells, samples, protocols, stacks, left_out, reference = [], [], [], {}, {}, [], None
    seen = set()
    for folder in folders:
        long, drawn, described, described_stacks = read_run(folder)
        protocols |= described
        for protocol, found in described_stacks.items():
            stacks.setdefault(protocol, []).extend(found)
        for model, rows in long.groupby("model", sort=False):
            first = rows.iloc[0]
            reproduced = first["provenance"] != PUBLISHED
            reference = reference or (first["protocol"] if reproduced else None)
            if model in seen and not reproduced:
                continue
            if reproduced and first["protocol"] != reference and not keep_other:
                left_out.append(f"{first['label']} ({folder}, protocol {first['protocol']})")
                continue
            # a model two runs share: the later run's row named after its folder
            name, label = (model, first["label"]) if model not in seen else (
                f"{model}@{Path(folder).name}", f"{first['label']} ({Path(folder).name})")
            seen.add(name)
            models.append({**first[MODEL_COLUMNS].to_dict(), "model": name, "label": label})
            cells.append(rows[CELL_COLUMNS].assign(model=name))
            samples.append(drawn[drawn["model"] == model].assign(model=name))
    shown = {model["protocol"] for model in models}
    return (pd.DataFrame(models, columns=MODEL_COLUMNS), pd.concat(cells, ignore_index=True),
            pd.concat(samples, ignore_index=True), protocols,
            {protocol: found for protocol, found in stacks.items() if protocol in shown}, reference or PAPER_DIGEST, left_out)


def leaderboard_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog leaderboard", description=(
        "Merge the leaderboards of several runs' results folders into one page; the first folder's protocol is "
        "the reference, reproduced rows of another protocol are left out (named) or, with "
        "--keep-other-protocols, kept, marked and ranked apart."))
    parser.add_argument("results", nargs="+", type=Path, help="results folders (each with tables/leaderboard.csv)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="folder of the merged tables and page")
    parser.add_argument("--keep-other-protocols", action="store_true")
    args = parser.parse_args(argv)
    models, cells, samples, protocols, stacks, reference, left_out = merged(args.results, args.keep_other_protocols)
    datasets = list(dict.fromkeys(cells.loc[cells["measure"] == "top1", "dataset"]))
    levels = [dataset for dataset in datasets if is_level(dataset)]
    cells = ranked(models, cells.drop(columns=[*RANK_COLUMNS, *ALL_RANK_COLUMNS], errors="ignore"), samples)
    write_leaderboard(Layout(args.output), models, cells, samples, protocols, stacks, reference, datasets, levels,
                      left_out)
    print(f"{len(models)} rows under {args.output} (reference protocol {reference})")
    for name in left_out:
        print(f"left out, another protocol: {name}")
    return 0
