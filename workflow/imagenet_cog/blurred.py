"""IN-1K-blurred (paper supp. E, Tab. 4, Fig. 8): the face-blurred release of ImageNet-1K.

The dataset ``in1k_blurred`` is evaluated exactly like IN-1K: the same concepts, its own
image root (``data.in1k_blurred_root``, laid out as <root>/{train,val}/<wnid>/), the
official train/ and val/ sets as listed there. The release lacks a few images of IN-1K
(train 1,281,066 / val 49,997 images), so its split table follows the files present; the
split summary counts the IN-1K images it lacks (``missing_vs_in1k``).

In demo mode its images are a copy of the demo's IN-1K images with a Gaussian blur over a
central region (standing in for faces) and a few images left out (:func:`blurred_copy`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from imagenet_cog.io import atomic_directory, read_lines

DATASET = "in1k_blurred"


def blurred_copy(source: str | Path, output: str | Path, dropped: int, seed: int, radius: float = 4.0,
                 concepts: Sequence[str] | None = None) -> list[str]:
    """Copy IN-1K's <source>/{train,val}/<wnid>/ images (of ``concepts``, default all) to
    ``output`` with the central half of each image blurred, leaving out ``dropped`` of them
    (chosen with ``seed``, never a concept's last image of a split); returns the relative
    paths left out."""
    from PIL import Image, ImageFilter

    source = Path(source)
    images = sorted(path.relative_to(source).as_posix() for path in source.glob("*/*/*")
                    if path.is_file() and (concepts is None or path.parent.name in concepts))
    by_folder: dict[str, list[str]] = {}
    for path in images:
        by_folder.setdefault(path.rsplit("/", 1)[0], []).append(path)
    candidates = [path for paths in by_folder.values() for path in paths[:-1]]
    rng = np.random.default_rng([seed, 1])
    left_out = sorted(rng.choice(candidates, size=min(dropped, len(candidates)), replace=False).tolist())
    with atomic_directory(output) as folder:
        for path in images:
            if path in left_out:
                continue
            target = Path(folder) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with Image.open(source / path) as image:
                image = image.convert("RGB")
                width, height = image.size
                box = (width // 4, height // 4, width - width // 4, height - height // 4)
                image.paste(image.crop(box).filter(ImageFilter.GaussianBlur(radius)), box[:2])
                image.save(target, format="JPEG", quality=90)
    return left_out


def missing_images(reference: Sequence[Mapping[str, str]], table: Sequence[Mapping[str, str]]) -> dict[str, int]:
    """Per split: images of the reference (IN-1K) split table that ``table`` lacks."""
    present = {(row["split"], row["path"]) for row in table}
    missing = {"train": 0, "test": 0}
    for row in reference:
        if (row["split"], row["path"]) not in present:
            missing[row["split"]] += 1
    return missing


def demo_blurred_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog demo-blurred",
                                     description="The demo's IN-1K-blurred: blurred copies, a few images left out.")
    parser.add_argument("--in1k-images", required=True)
    parser.add_argument("--concepts", default=None, help="the demo IN-1K's wnids, one a line (default: every folder)")
    parser.add_argument("--output", required=True)
    parser.add_argument("--dropped", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    concepts = set(read_lines(args.concepts)) if args.concepts else None
    left_out = blurred_copy(args.in1k_images, args.output, args.dropped, args.seed, concepts=concepts)
    print(f"{args.output}: blurred copy of {args.in1k_images}, left out {', '.join(left_out) or 'none'}")
    return 0


def blurred_levels(summary, blurred_runs, models: dict, seeds: Sequence[str]):
    """Fig. 8's rows: the summary's linear rows of Lin's levels at N = all, with IN-1K-b's
    summary (over ``seeds``) in place of IN-1K's."""
    import pandas as pd

    from imagenet_cog.aggregate import lin_rows, summarise

    levels = lin_rows(summary)
    levels = levels[(levels["shots"] == "all") & (levels["dataset"] != "in1k")]
    blurred = summarise(blurred_runs, models, [DATASET], ["all"], seeds)
    return pd.concat([blurred, levels.drop(columns="level_set")], ignore_index=True)


def blurred_results_command(argv: Sequence[str]) -> int:
    """Table of IN-1K vs IN-1K-blurred top-1 per model and N, and the mean drop."""
    import pandas as pd

    from imagenet_cog.aggregate import latex_table, load_probe_results, markdown_table, read_summary
    from imagenet_cog.io import atomic_output, write_text
    from imagenet_cog.layout import Layout

    parser = argparse.ArgumentParser(prog="python -m imagenet_cog blurred-results", description=blurred_results_command.__doc__)
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--models", required=True, help="JSON: the models' config entries")
    parser.add_argument("--shots", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--summary", required=True, help="the results summary (levels of the figure)")
    args = parser.parse_args(argv)
    layout = Layout(args.results_root)
    models = json.loads(args.models)
    runs = load_probe_results(args.results_root, list(models), ["in1k", DATASET], args.shots, args.seeds)
    top1 = runs.groupby(["model", "dataset", "shots"])["test_top1"].mean()
    rows = []
    for model, entry in models.items():
        for shots in args.shots:
            in1k, blurred = top1[(model, "in1k", shots)], top1[(model, DATASET, shots)]
            rows.append({"model": entry.get("label", model), "N": shots, "IN-1K": round(in1k, 2),
                         "IN-1K-b": round(blurred, 2), "drop": round(in1k - blurred, 2)})
    table = pd.DataFrame(rows)
    mean_drop = float(table["drop"].mean()) if len(table) else float("nan")
    table = pd.concat([table, pd.DataFrame([{"model": "mean", "N": "", "IN-1K": "", "IN-1K-b": "",
                                             "drop": round(mean_drop, 2)}])], ignore_index=True)
    with atomic_output(layout.table("in1k_blurred", "csv")) as temporary:
        table.to_csv(temporary, index=False)
    caption = (f"Top-1 (%) on IN-1K and on its face-blurred release IN-1K-b (supp. E, Tab. 4), mean over seeds "
               f"{', '.join(args.seeds)}; drop = IN-1K - IN-1K-b, mean drop {mean_drop:.2f} points (paper: 0.91).")
    write_text(layout.table("in1k_blurred", "md"), markdown_table(table, caption, []))
    write_text(layout.table("in1k_blurred", "tex"), latex_table(table, caption, []))
    import matplotlib.pyplot as plt
    import seaborn as sns

    from imagenet_cog.figures import no_data, panel_grid, save_figure, top1_levels_figure

    sns.set_theme(context="paper", style="whitegrid", font_scale=0.9)  # as the result figures
    if "all" in args.shots:
        fig = top1_levels_figure(blurred_levels(read_summary(args.summary), runs, models, args.seeds))
    else:
        fig, axes = panel_grid(1, 1)
        no_data(axes.flat[0], "no N = all probes of IN-1K-b (in1k_blurred.shots)")
    save_figure(fig, layout, DATASET)
    plt.close(fig)
    print(f"mean drop {mean_drop:.2f} points over {len(rows)} cells")
    return 0

