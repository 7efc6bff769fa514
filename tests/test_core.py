"""The shared core: dataset and kind names, devices, seeded choices, table writing."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from imagenet_cog.core import naming
from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.sampling import derived_rng, spread
from imagenet_cog.core.tables import write_table


def test_names_are_formed_and_parsed_back():
    assert naming.level_names(3) == ["l1", "l2", "l3"]
    assert naming.gap_name(2) == "gap2" and naming.level_number("l12") == 12
    assert naming.is_level("l3") and not naming.is_level("gap3") and not naming.is_level("wup-l3")
    assert naming.random_dataset(naming.draw_id(7)) == "random-07"
    assert naming.level_set_dataset("wup", "l3") == "wup-l3" and naming.view_parts("wup-l3") == ("wup", "l3")
    assert naming.view_parts("random-07") == ("random", "07")
    assert [naming.level_set_of(d) for d in ("in1k", "l3", "in1k_blurred", "pool", "wup-l3", "random-07")] == [
        "lin", "lin", "lin", "lin", "wup", "random"]
    assert naming.balanced_dataset("l4") == "balanced-l4" and naming.balanced_source("balanced-l4") == "l4"
    assert naming.balanced_source("l4") == "l4"
    assert naming.pca_kind(256) == "pca-256" and naming.pca_dim("pca-256") == 256 and naming.pca_dim("mlp") is None
    assert [naming.dataset_title(d) for d in ("in1k", "in1k_blurred", "l3")] == ["IN-1K", "IN-1K-b", "L3"]
    assert naming.shots_title("all") == "All" and naming.shots_title("8") == "N=8"


def test_wildcard_patterns_are_the_ones_the_rule_files_always_matched():
    """Built from the names, they equal the patterns the rule files spelt out before."""
    assert naming.EXTRACTED_DATASET == r"in1k_blurred|in1k|l[1-9][0-9]*|pool"
    assert naming.VIEW_DATASET == r"(?:wup|path|jcn|res|word2vec)-l[1-9][0-9]*|random-[0-9]{2}"
    assert naming.BALANCED_DATASET == r"balanced-(?:in1k|l[1-9][0-9]*)"
    assert naming.LEVEL_SET_PATTERN == r"wup|path|jcn|res|word2vec"
    assert naming.KIND_PATTERN == r"mlp|mlp_noact|pca-[1-9][0-9]*"
    assert naming.DEFAULT_DATASET == r"in1k|l[1-9][0-9]*"
    dataset = re.compile(f"{naming.EXTRACTED_DATASET}|{naming.VIEW_DATASET}|{naming.BALANCED_DATASET}")
    made = ["in1k", "l5", "pool", "in1k_blurred", naming.level_set_dataset("word2vec", "l2"),
            naming.random_dataset("03"), naming.balanced_dataset("in1k")]
    assert all(dataset.fullmatch(name) for name in made)
    assert not any(dataset.fullmatch(name) for name in ("l0", "lin-l1", "random-7", "balanced-pool", "in21k"))
    assert all(re.fullmatch(naming.KIND_PATTERN, kind) for kind in ("mlp", "mlp_noact", naming.pca_kind(8)))
    assert not re.fullmatch(naming.KIND_PATTERN, "linear")


def test_derived_generators_depend_on_their_keys_alone():
    first = derived_rng("split", 0, "n01440764").integers(0, 1 << 30, 4)
    assert (first == derived_rng("split", 0, "n01440764").integers(0, 1 << 30, 4)).all()
    assert not (first == derived_rng("split", 1, "n01440764").integers(0, 1 << 30, 4)).all()


def test_spread_takes_first_last_and_even_steps():
    items = [str(index) for index in range(10)]
    assert spread(items, 4) == ["0", "3", "6", "9"]
    assert spread(items, 2) == ["0", "9"]
    assert spread(items[:3], 4) == ["0", "1", "2"]


def test_cuda_request_without_gpu_is_a_clear_error():
    """The error names the setting the request came from."""
    if torch.cuda.is_available():
        assert resolve_device("cuda", "probes.device").type == "cuda"
    else:
        with pytest.raises(RuntimeError, match="probes.device"):
            resolve_device("cuda", "probes.device")
    assert resolve_device("cpu", "probes.device").type == "cpu"


def test_a_table_is_written_as_csv_markdown_and_latex(tmp_path):
    layout = Layout(str(tmp_path))
    table = pd.DataFrame({"Model": ["a_b†"], "IN-1K": ["50.0 ± 1.0*"], "L5": ["—"]})
    write_table(layout, "example", table, "Top-1 (%)", ["a note"])
    assert (tmp_path / "tables" / "example.csv").read_text() == "Model,IN-1K,L5\na_b†,50.0 ± 1.0*,—\n"
    markdown = (tmp_path / "tables" / "example.md").read_text()
    assert markdown.startswith("**Top-1 (%)**\n\n| Model | IN-1K | L5 |\n|---|---:|---:|\n| a_b† | 50.0 ± 1.0* | — |")
    assert markdown.endswith("\na note\n")
    latex = (tmp_path / "tables" / "example.tex").read_text()
    assert r"a\_b$^\dagger$ & 50.0 $\pm$ 1.0$^{*}$ & -- \\" in latex
    assert r"\caption{Top-1 (\%) a note}" in latex
