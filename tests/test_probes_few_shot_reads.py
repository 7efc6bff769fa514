"""Few-shot probe jobs read only the training rows they use (validation split and N-shot
samples), and score exactly as when the whole training set is read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_cog.features.store import merge_shards, read_features, read_labels, write_shard
from imagenet_cog.probes.probe import main
from imagenet_cog.probes.search import ProbeJob, SearchSettings, probe_dataset, rows_used, run_selections

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLASSES, PER_CLASS, DIM, SHARD = 6, 40, 16, 50
INVALID = (7, 61, 200)  # file rows whose image could not be decoded
SETTINGS = SearchSettings(trials=3, epochs=4, batch_size=16)


def write_split(folder: Path, rows_per_class: int, seed: int, invalid=()) -> Path:
    """A merged float16 feature file over shards, rows sorted by class as split tables are."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(size=(CLASSES, DIM)) * 2
    labels = np.repeat(np.arange(CLASSES), rows_per_class)
    features = (centres[labels] + rng.normal(size=(labels.size, DIM))).astype(np.float16)
    valid = np.ones(labels.size, dtype=bool)
    valid[list(invalid)] = False
    features[~valid] = 0
    shards = []
    for number, start in enumerate(range(0, labels.size, SHARD)):
        stop = min(labels.size, start + SHARD)
        shards.append(folder / f"shard-{number:05d}.h5")
        write_shard(shards[-1], features[start:stop], labels[start:stop], np.arange(start, stop),
                    [f"{row}.JPEG" for row in range(start, stop)], valid[start:stop], {"model": "m"})
    merge_shards(shards, folder.with_suffix(".h5"))
    return folder.with_suffix(".h5")


@pytest.fixture
def files(tmp_path):
    return (write_split(tmp_path / "train", PER_CLASS, 0, INVALID), write_split(tmp_path / "test", 10, 1))


def test_reading_rows_gives_those_rows_of_a_whole_read(files, monkeypatch):
    train, _ = files
    whole = read_features(train)
    assert whole.features.shape == (CLASSES * PER_CLASS - len(INVALID), DIM)
    np.testing.assert_array_equal(read_labels(train), whole.labels)
    rows = np.array([0, 6, 7, 60, 150, whole.labels.size - 1])
    part = read_features(train, rows=rows)
    np.testing.assert_array_equal(part.features, whole.features[rows])
    np.testing.assert_array_equal(part.labels, whole.labels[rows])
    assert part.invalid_paths == whole.invalid_paths == [f"{row}.JPEG" for row in INVALID]
    # Blocks without a wanted row are not read at all.
    monkeypatch.setattr("imagenet_cog.features.store.READ_CHUNK_ROWS", 50)
    import h5py

    reads = []
    getitem = h5py.Dataset.__getitem__

    def counting(self, key):
        if self.name == "/features":
            reads.append(key)
        return getitem(self, key)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", counting)
    np.testing.assert_array_equal(read_features(train, rows=np.array([3, 4])).features, whole.features[[3, 4]])
    assert reads == [slice(0, 50)]
    with pytest.raises(ValueError, match="sorted, distinct"):
        read_features(train, rows=np.array([4, 3]))


def test_a_few_shot_run_uses_its_validation_split_and_two_samples(files):
    labels = read_labels(files[0])
    assert rows_used(labels, "all", 22, 0.2, "l1") is None
    search, validation, final = run_selections(labels, "3", 22, 0.2, "l1")
    rows = rows_used(labels, "3", 22, 0.2, "l1")
    np.testing.assert_array_equal(rows, np.unique(np.concatenate([search, validation, final])))
    assert validation.size == sum(int(0.2 * count) for count in np.bincount(labels))
    assert search.size == final.size == 3 * CLASSES
    assert rows.size <= validation.size + 2 * 3 * CLASSES < labels.size


def probe_command(train: Path, test: Path, folder: Path, shots: str, trials: int = SETTINGS.trials) -> dict:
    output = folder / f"shots-{shots}.json"
    status = main(["--train", str(train), "--test", str(test), "--output", str(output),
                   "--study", str(folder / f"study-{shots}.jsonl"), "--model", "m", "--dataset", "l1",
                   "--shots", shots, "--seed", "37", "--trials", str(trials), "--epochs", str(SETTINGS.epochs),
                   "--batch-size", str(SETTINGS.batch_size), "--device", "cpu", "--precision", "float32"])
    assert status == 0
    return json.loads(output.read_text())


@pytest.mark.parametrize("shots", ["1", "4", "all"])
def test_reading_only_used_rows_scores_exactly_as_reading_all(files, tmp_path, shots):
    train, test = files
    result = probe_command(train, test, tmp_path, shots)
    whole, test_set = read_features(train), read_features(test)
    settings = SearchSettings(**{**SETTINGS.__dict__, "precision": "float32"})
    reference = probe_dataset(ProbeJob(whole.features, whole.labels, test_set.features, test_set.labels, settings=settings, device="cpu", where="l1"), shots=shots, seed=37, journal=str(tmp_path / "reference.jsonl"))
    for key in ("best_params", "val_top1", "test_top1", "test_top5", "trials", "n_train", "n_test",
                "n_classes", "feature_dim", "final_diverged"):
        assert result[key] == reference[key], key
    # The study's name hashes the rows the run uses, whichever rows are held
    assert result["study"]["name"] == reference["study"]["name"]


def test_a_few_shot_study_resumes_across_jobs(files, tmp_path):
    train, test = files
    first = probe_command(train, test, tmp_path, "2", trials=2)
    again = probe_command(train, test, tmp_path, "2", trials=4)
    assert again["study"]["name"] == first["study"]["name"]
    assert again["study"]["resumed_trials"] == 2 and again["trials"][:2] == first["trials"]


def test_probe_dataset_refuses_features_missing_rows_the_run_uses(files, tmp_path):
    train, test = files
    labels = read_labels(train)
    rows = rows_used(labels, "2", 22, 0.2, "l1")
    test_set = read_features(test)
    with pytest.raises(ValueError, match="do not hold the rows"):
        probe_dataset(ProbeJob(read_features(train, rows=rows[1:]).features, labels, test_set.features, test_set.labels, settings=SETTINGS, device="cpu", train_rows=rows[1:]), shots="2", seed=22, journal=str(tmp_path / "j.jsonl"))
