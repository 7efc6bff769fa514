"""Rate files: a device's rates for the cost model, each figure with its provenance.

A rates file (YAML, ``resources/rates/h100.yaml``) names the device and gives every rate of
:data:`imagenet_cog.plan.cost.RATE_KEYS` as ``{value, unit, kind, where, date}``: ``kind``
is ``measured`` or ``projection``; the rates of the kinds with jobs of their own and of
fine-tuning (:data:`imagenet_cog.plan.cost.OPTIONAL_RATE_KEYS`) are optional. ``benchmarks/protocol_cost.py --write-rates`` writes the flat JSON of measured
values, which is read too (every figure then counts as measured).
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import write_text
from imagenet_cog.plan.cost import (
    EXTRACTION_DEVICE_KEY,
    EXTRACTION_HOST_KEY,
    OPTIONAL_RATE_KEYS,
    RATE_KEYS,
    node_extraction_rates,
)
from imagenet_cog.probes.kinds import KINDS

MEASURED, PROJECTION = "measured", "projection"


class RatesError(ExplainedError, ValueError):
    pass


@dataclass
class Rates:
    device: str
    values: dict  # what cost.project reads: RATE_KEYS (+ OPTIONAL_RATE_KEYS, probe_shape, device)
    kinds: dict[str, str] = field(default_factory=dict)  # rate -> measured | projection
    where: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def projected_keys(self, keys: tuple[str, ...] = RATE_KEYS) -> list[str]:
        """Those of ``keys`` the file has that are not measured on the device."""
        return [key for key in keys if key in self.values and self.kinds.get(key) != MEASURED]

    def for_node(self, workers: int, host_resize: str = "pil") -> Rates:
        """These rates on a GPU job with ``workers`` loader workers: a projected extraction rate
        with both its terms in the file becomes their smaller (a measured one is kept)."""
        key = "extraction_images_per_s"
        terms = (EXTRACTION_HOST_KEY, EXTRACTION_DEVICE_KEY)
        if self.kinds.get(key) == MEASURED or not all(term in self.values for term in terms):
            return self
        node = node_extraction_rates(self.values, workers, host_resize)
        where = (f"min(host: {max(workers, 1)} loader workers x {self.values[EXTRACTION_HOST_KEY][host_resize]:g} "
                 f"images/s ({host_resize} resize), device: {EXTRACTION_DEVICE_KEY}) per architecture")
        return Rates(self.device, {**self.values, key: node}, dict(self.kinds), {**self.where, key: where}, self.source)

    def prices(self, kind: str) -> bool:
        """Whether the file has the rates of its own that a priced kind needs."""
        return all(key in self.values for key in KINDS[kind].own_rates)


def read_rates(path: str | os.PathLike) -> Rates:
    """The rates of a YAML rates file or of protocol_cost.py's JSON; a clear error names a
    missing rate."""
    path = Path(path)
    if not path.is_file():
        raise RatesError(f"rates file '{path}' does not exist; set plan.rates to a file of resources/rates/ or "
                         f"to one written by plan.write_rates.")
    loaded = (json.loads if path.suffix == ".json" else yaml.safe_load)(path.read_text()) or {}
    if "rates" in loaded:
        entries = loaded["rates"]
        values = {key: entry["value"] for key, entry in entries.items()}
        kinds = {key: entry.get("kind", PROJECTION) for key, entry in entries.items()}
        where = {key: str(entry.get("where", "")) for key, entry in entries.items()}
    else:
        values = {key: loaded[key] for key in RATE_KEYS + OPTIONAL_RATE_KEYS if key in loaded}
        kinds = {key: MEASURED for key in values}
        where = {key: "benchmarks/protocol_cost.py --write-rates" for key in values}
    missing = [key for key in RATE_KEYS if key not in values]
    if missing:
        raise RatesError(f"rates file '{path}' lacks {', '.join(missing)}; add them or measure them again "
                         f"(benchmarks/protocol_cost.py --write-rates).")
    if "probe_shape" in loaded:
        values["probe_shape"] = list(loaded["probe_shape"])
    device = str(loaded.get("device", path.stem))
    values["device"] = device
    return Rates(device, values, kinds, where, str(path))


def write_rates(path: str | os.PathLike, rates: Rates, where: str) -> None:
    """Writes ``rates`` as a YAML rates file, every figure marked measured at ``where``."""
    today = datetime.date.today().isoformat()
    entries = {}
    for key in [key for key in RATE_KEYS + OPTIONAL_RATE_KEYS if key in rates.values]:
        value = rates.values[key]
        entries[key] = {"value": dict(value) if isinstance(value, dict) else float(value),
                        "kind": rates.kinds.get(key, MEASURED), "where": rates.where.get(key, where), "date": today}
    document = {"device": rates.device, "rates": entries}
    if "probe_shape" in rates.values:
        document["probe_shape"] = list(rates.values["probe_shape"])
    header = (f"# Rates for the plan target, calibrated on {rates.device} from a run's benchmark files "
              f"(imagenet_cog.plan.measured).\n")
    write_text(path, header + yaml.safe_dump(document, sort_keys=False, width=120))
