"""config/imagenet.yaml sets back every setting the demo's config.yaml shrinks."""

from __future__ import annotations

from pathlib import Path

import yaml

REPOSITORY = Path(__file__).resolve().parents[1]
# demo: read only in demo mode; models: the real config replaces the demo's networks
DEMO_ONLY_SECTIONS = {"demo", "models"}
MISSING = object()


def leaves(mapping: dict, prefix: tuple = ()):
    """(key path, value) of every setting that is not itself a non-empty mapping."""
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def lookup(mapping: dict, path: tuple):
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return MISSING
        mapping = mapping[key]
    return mapping


def schema_default(schema: dict, path: tuple):
    for key in path:
        schema = schema.get("properties", {}).get(key)
        if schema is None:
            return MISSING
    return schema.get("default", MISSING)


def test_the_real_config_sets_back_what_the_demo_shrinks():
    demo = yaml.safe_load((REPOSITORY / "config.yaml").read_text())
    real = yaml.safe_load((REPOSITORY / "config" / "imagenet.yaml").read_text())
    schema = yaml.safe_load((REPOSITORY / "workflow" / "schemas" / "config.schema.yaml").read_text())
    kept_from_demo = [
        ".".join(path)
        for path, value in leaves(demo)
        if path[0] not in DEMO_ONLY_SECTIONS
        and lookup(real, path) is MISSING
        and schema_default(schema, path) != value
    ]
    assert kept_from_demo == [], f"config/imagenet.yaml keeps the demo's value of {kept_from_demo}"

