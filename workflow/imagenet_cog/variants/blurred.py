"""IN-1K-blurred (paper supp. E, Tab. 4, Fig. 8): the face-blurred release of ImageNet-1K.

The dataset ``in1k_blurred`` is evaluated exactly like IN-1K: the same concepts, its own
image root (``data.in1k_blurred_root``, laid out as <root>/{train,val}/<wnid>/), the
official train/ and val/ sets as listed there. The release lacks a few images of IN-1K
(train 1,281,066 / val 49,997 images), so its split table follows the files present; the
split summary counts the IN-1K images it lacks (``missing_vs_in1k``,
:func:`imagenet_cog.splits.summary.missing_images`).

In demo mode its images are a copy of the demo's IN-1K images with a Gaussian blur over a
central region (standing in for faces) and a few images left out
(:mod:`imagenet_cog.demo.blurred`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import IN1K, IN1K_BLURRED
from imagenet_cog.core.plots import no_data, panel_grid, save_figure, set_theme
from imagenet_cog.core.tables import write_table
from imagenet_cog.results.figures import top1_levels_figure
from imagenet_cog.results.summary import lin_rows, load_probe_results, read_summary, summarise


def blurred_levels(summary, blurred_runs, models: dict, seeds: Sequence[str]):
    """Fig. 8's rows: the summary's linear rows of Lin's levels at N = all, with IN-1K-b's
    summary (over ``seeds``) in place of IN-1K's."""
    levels = lin_rows(summary)
    levels = levels[(levels["shots"] == "all") & (levels["dataset"] != IN1K)]
    blurred = summarise(blurred_runs, models, [IN1K_BLURRED], ["all"], seeds)
    return pd.concat([blurred, levels.drop(columns="level_set")], ignore_index=True)


def blurred_results_command(argv: Sequence[str]) -> int:
    """Table of IN-1K vs IN-1K-blurred top-1 per model and N, and the mean drop."""
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog blurred-results", description=blurred_results_command.__doc__)
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--models", required=True, help="JSON: the models' config entries")
    parser.add_argument("--shots", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--summary", required=True, help="the results summary (levels of the figure)")
    args = parser.parse_args(argv)
    layout = Layout(args.results_root)
    models = json.loads(args.models)
    runs = load_probe_results(args.results_root, list(models), [IN1K, IN1K_BLURRED], args.shots, args.seeds)
    top1 = runs.groupby(["model", "dataset", "shots"])["test_top1"].mean()
    rows = []
    for model, entry in models.items():
        for shots in args.shots:
            in1k, blurred = top1[(model, IN1K, shots)], top1[(model, IN1K_BLURRED, shots)]
            rows.append({"model": entry.get("label", model), "N": shots, "IN-1K": round(in1k, 2),
                         "IN-1K-b": round(blurred, 2), "drop": round(in1k - blurred, 2)})
    table = pd.DataFrame(rows)
    mean_drop = float(table["drop"].mean()) if len(table) else float("nan")
    table = pd.concat([table, pd.DataFrame([{"model": "mean", "N": "", "IN-1K": "", "IN-1K-b": "",
                                             "drop": round(mean_drop, 2)}])], ignore_index=True)
    caption = (f"Top-1 (%) on IN-1K and on its face-blurred release IN-1K-b (supp. E, Tab. 4), mean over seeds "
               f"{', '.join(args.seeds)}; drop = IN-1K - IN-1K-b, mean drop {mean_drop:.2f} points (paper: 0.91).")
    write_table(layout, IN1K_BLURRED, table, caption, [])
    set_theme()  # as the result figures
    if "all" in args.shots:
        fig = top1_levels_figure(blurred_levels(read_summary(args.summary), runs, models, args.seeds))
    else:
        fig, axes = panel_grid(1, 1)
        no_data(axes.flat[0], "no N = all probes of IN-1K-b (in1k_blurred.shots)")
    save_figure(fig, layout, IN1K_BLURRED)
    plt.close(fig)
    print(f"mean drop {mean_drop:.2f} points over {len(rows)} cells")
    return 0
