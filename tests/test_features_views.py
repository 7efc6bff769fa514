"""Level-set datasets as views over extracted features: the rows of each concept come from
the shards of whichever dataset extracted it, labels are re-numbered for the view, and a
probe reading the view sees exactly those rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_cog.core.io import write_lines, write_tsv
from imagenet_cog.features.store import merge_shards, read_features
from imagenet_cog.features.views import (
    ViewError,
    choose_view_concepts,
    row_runs,
    view_command,
    write_view,
)

ATTRIBUTES = {"model": "m", "arch": "resnet50", "weights": "random", "random_weights": True,
              "preprocessing": json.dumps({"size": 8}), "feature_dim": 3, "features_dtype": "float32", "split": "train"}


def extracted(folder: Path, dataset: str, concepts: dict[str, int], shard_size: int, invalid: set[str] = frozenset()):
    """A split table and merged train features of ``dataset``: each concept's rows, a
    feature value encoding (concept number, image number) so rows can be traced."""
    from imagenet_cog.features.store import write_shard

    rows = []
    for label, (wnid, count) in enumerate(sorted(concepts.items())):
        rows += [(f"{wnid}/{wnid}_{i:02d}.JPEG", wnid, label, "train") for i in range(count)]
        rows += [(f"{wnid}/{wnid}_t{i}.JPEG", wnid, label, "test") for i in range(2)]
    table = folder / f"{dataset}.tsv"
    write_tsv(table, ["path", "wnid", "label", "split"], rows)
    train = [row for row in rows if row[3] == "train"]
    shards = []
    for number, start in enumerate(range(0, len(train), shard_size)):
        part = train[start:start + shard_size]
        features = np.array([[int(p[1][1:]), int(p[0][-7:-5]), 0] for p in part], dtype=np.float32)
        shard = folder / dataset / "train" / f"shard-{number:05d}.h5"
        shard.parent.mkdir(parents=True, exist_ok=True)
        write_shard(shard, features, [p[2] for p in part], list(range(start, start + len(part))), [p[0] for p in part],
                    [p[0] not in invalid for p in part], ATTRIBUTES | {"dataset": dataset, "shard": number})
        shards.append(shard)
    merged = folder / dataset / "train.h5"
    merge_shards(shards, merged)
    return dataset, table, merged


def test_row_runs():
    assert row_runs([0, 1, 2, 5, 6, 9]) == [(0, 3), (5, 7), (9, 10)]
    assert row_runs([]) == []


def test_a_view_reads_its_concepts_rows_across_sources_and_shards(tmp_path):
    lin = extracted(tmp_path, "l1", {"n00000001": 5, "n00000002": 4, "n00000003": 3}, shard_size=4,
                    invalid={"n00000002/n00000002_01.JPEG"})
    pool = extracted(tmp_path, "pool", {"n00000009": 3, "n00000007": 2}, shard_size=2)
    output = tmp_path / "views" / "wup-l1" / "train.h5"
    written = write_view(output, "wup-l1", "train", ["n00000009", "n00000002", "n00000001"], [lin, pool])
    assert written == {"concepts": 3, "rows": 5 + 4 + 3}
    view = read_features(output)
    # Labels: index among the view's sorted wnids; rows in that order; the invalid image left out.
    expected = [(1, i) for i in range(5)] + [(2, i) for i in range(4) if i != 1] + [(9, i) for i in range(3)]
    assert [tuple(int(v) for v in row[:2]) for row in view.features] == expected
    assert view.labels.tolist() == [0] * 5 + [1] * 3 + [2] * 3
    assert view.invalid_paths == ["n00000002/n00000002_01.JPEG"]
    assert view.metadata["dataset"] == "wup-l1" and view.metadata["model"] == "m"
    assert json.loads(view.metadata["sources"]) == ["l1", "pool"]
    # The view holds no features of its own: every row is read from the sources' shards.
    import h5py

    with h5py.File(output) as handle:
        assert handle["features"].is_virtual
        shard_files = {Path(s.file_name).name for s in handle["features"].virtual_sources()}
        assert shard_files == {"shard-00000.h5", "shard-00001.h5", "shard-00002.h5"}
        assert handle["index"][:5].tolist() == [0, 1, 2, 3, 4]


def test_every_concept_must_have_features(tmp_path, capsys):
    lin = extracted(tmp_path, "l1", {"n00000001": 2, "n00000002": 2}, shard_size=4)
    with pytest.raises(ViewError, match="1 concepts .e.g. n00000005. are in no source dataset"):
        write_view(tmp_path / "v.h5", "random-01", "train", ["n00000001", "n00000005"], [lin])
    concepts = tmp_path / "concepts.txt"
    write_lines(concepts, ["n00000001", "n00000005"])
    status = view_command(["--dataset", "random-01", "--split", "train", "--concepts", str(concepts),
                           "--source", "l1", str(lin[1]), str(lin[2]), "--output", str(tmp_path / "v.h5")])
    assert status == 1 and "random-01: 1 concepts" in capsys.readouterr().err
    assert not (tmp_path / "v.h5").exists()


def test_demo_views_keep_a_spread_of_the_concepts_with_images():
    wanted = [f"n{i:08d}" for i in range(10)]
    assert choose_view_concepts(wanted, set(wanted[::2]), 3, "l1") == ["n00000000", "n00000004", "n00000008"]
    with pytest.raises(ViewError, match="only 1 of the 10 concepts have demo images"):
        choose_view_concepts(wanted, {"n00000003"}, 3, "l1")
