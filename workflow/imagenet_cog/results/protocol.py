"""What defines a number of a run (its protocol) and the digest that names it.

Two numbers are comparable when they were measured under the same protocol: the same images
(real ImageNet, or the demo's generated world and its settings), the same levels, splits,
feature precision and probe protocol (N, seeds, trials, epochs, batch, ranges). A model's own
preprocessing is part of the model, not of the protocol. The digest is the first
``DIGEST_CHARACTERS`` hex digits of the SHA-256 of the protocol as sorted JSON.

``PAPER_PROTOCOL`` is the paper's protocol as ``config/imagenet.yaml`` transcribes it (a test
holds the two equal, with and without the add-on files laid over it, whose stages are not part
of a protocol): the protocol of the published rows.

Standard library only: the Snakefile builds a run's protocol with it when it is parsed.
"""

from __future__ import annotations

import hashlib
import json

DIGEST_CHARACTERS = 12
LEVEL_KEYS = ("source", "similarity", "num_levels", "concepts_per_level", "min_images")
SPLIT_KEYS = ("test_per_concept", "max_train_per_concept", "seed")
PROBE_KEYS = ("shots", "seeds", "trials", "epochs", "batch_size", "momentum", "val_fraction", "lr_range",
              "wd_range", "two_stage")
# the demo's generated world: its settings change every image, hence every number
DEMO_KEYS = ("concepts_per_dataset", "in1k_concepts", "train_images_per_concept", "test_images_per_concept",
             "image_size", "seed")

PAPER_PROTOCOL = {
    "images": "imagenet",
    "levels": {"source": "wordnet", "similarity": "lin", "num_levels": 5, "concepts_per_level": 1000,
               "min_images": 782},
    "splits": {"test_per_concept": 50, "max_train_per_concept": 1300, "seed": 0},
    "probes": {"shots": ["1", "2", "4", "8", "16", "32", "64", "128", "all"], "seeds": ["22", "37", "45", "77", "93"],
               "trials": 30, "epochs": 100, "batch_size": 1024, "momentum": 0.9, "val_fraction": 0.2,
               "lr_range": [0.1, 100.0], "wd_range": [1e-12, 0.0001], "two_stage": None},
    "features": {"dtype": "float16"},
}


def run_protocol(config: dict) -> dict:
    """The protocol of a validated config (defaults filled)."""
    probes = config["probes"]
    protocol = {
        "images": config["mode"],
        "levels": {key: config["levels"][key] for key in LEVEL_KEYS},
        "splits": {key: config["splits"][key] for key in SPLIT_KEYS},
        "probes": {key: probes.get(key) for key in PROBE_KEYS},
        "features": {"dtype": config["features"]["dtype"]},
    }
    protocol["probes"]["shots"] = [str(shots) for shots in probes["shots"]]
    protocol["probes"]["seeds"] = [str(seed) for seed in probes["seeds"]]
    protocol["probes"]["lr_range"] = [float(value) for value in probes["lr_range"]]
    protocol["probes"]["wd_range"] = [float(value) for value in probes["wd_range"]]
    if config["mode"] == "demo":
        protocol["demo"] = {key: config["demo"][key] for key in DEMO_KEYS}
    return protocol


def series_protocol(config: dict, deviation: dict) -> dict:
    """The protocol of a series' checkpoints of the series protocol alone: the run's, its probes
    at the series' N, seeds and trials, the deviation named (``deviation``:
    ``imagenet_cog.models.series.SeriesProtocol.deviation``); its digest differs from the run's."""
    protocol = run_protocol(config)
    probes = protocol["probes"]
    probes.update(shots=list(deviation["shots"]), seeds=list(deviation["seeds"]), trials=deviation["trials"])
    protocol["deviations"] = [deviation]
    return protocol


def digest(protocol: dict) -> str:
    text = json.dumps(protocol, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARACTERS]


PAPER_DIGEST = digest(PAPER_PROTOCOL)
