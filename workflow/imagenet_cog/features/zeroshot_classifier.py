"""The zero-shot text classifier of an open_clip model for a dataset (``zeroshot-classifier``).

The dataset's names table (``concept-names``, ``core.names_table``) and a template set give
the classifier (``models.open_clip_text``): the text features of a dataset, as the image
features are its images'. One HDF5 file (:mod:`.zeroshot_classifier_file`), its own cache:
when it exists with the provenance the command would write, the command keeps it and
computes nothing; any difference (other weights, an edited name, another template set or
open_clip version) computes it again.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import open_clip

from imagenet_cog.core.command_line import add_open_clip_model_options, setup_logging
from imagenet_cog.core.device import DeviceError, resolve_device
from imagenet_cog.core.io import read_lines
from imagenet_cog.core.names_table import NamesTableError, foreign_concepts, read_names_table, shared_names
from imagenet_cog.features.zeroshot_classifier_file import ZeroShotClassifier, read_provenance, write_classifier
from imagenet_cog.models.open_clip_text import TEMPLATE_SETS, build_text_model, text_classifier
from imagenet_cog.models.registry import ModelSpec, file_sha256, weights_identity
from imagenet_cog.models.series import resolve_weights
from imagenet_cog.models.timm_models import PretrainedWeightsUnavailable

log = logging.getLogger("imagenet_cog.features.zeroshot_classifier")


def expected_provenance(spec: ModelSpec, identity: str, names_path: str | os.PathLike, templates: str) -> dict[str, str]:
    return {"model": spec.name, "arch": spec.arch, "weights": identity, "open_clip_version": open_clip.__version__,
            "templates": templates, "names_sha256": file_sha256(names_path)}


def zeroshot_classifier_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog zeroshot-classifier",
        description="Write the zero-shot text classifier of an open_clip model for a dataset's names table "
                    "(kept when the file exists with the same provenance).",
    )
    add_open_clip_model_options(parser, "embeds the concept names")
    parser.add_argument("--names", required=True, help="the dataset's names table (concept-names)")
    parser.add_argument("--templates", choices=sorted(TEMPLATE_SETS), default="openai",
                        help="open_clip's prompt templates: openai (80) or simple (7)")
    parser.add_argument("--output", required=True, help="the classifier file to write (HDF5)")
    parser.add_argument("--named", help="what the table names: a dataset, or open-set (every dataset's concepts)")
    parser.add_argument("--concepts", nargs="*", default=[],
                        help="the concept lists of the datasets the table names (checked against them)")
    parser.add_argument("--other-concepts", nargs="*", default=[], metavar="DATASET=FILE",
                        help="other datasets' concept lists: whose concepts a wrong table names")
    args = parser.parse_args(argv)
    setup_logging(to_stdout=True)
    try:
        spec = ModelSpec.from_config(args.model_name, {"arch": args.arch, "weights": resolve_weights(args.weights),
                                                       "trusted_globals": args.trusted_globals})
        names = read_names_table(args.names)
        check_concepts(args, names)
        identity = weights_identity(spec)
        provenance = expected_provenance(spec, identity, args.names, args.templates)
        if read_provenance(args.output) == provenance:
            log.info(f"{args.output} is up to date (same weights, names and templates): kept")
            return 0
        device = resolve_device(args.device, "features.device")
        model = build_text_model(spec, identity)
    except (NamesTableError, ValueError, OSError, PretrainedWeightsUnavailable, DeviceError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for name, labels in shared_names(names).items():
        log.warning(f"note: {args.names}: labels {', '.join(map(str, labels))} share the name '{name}'; "
                    f"the classifier cannot tell them apart")
    log.info("\n".join(model.notes))
    weights = text_classifier(model, [n.name for n in names], TEMPLATE_SETS[args.templates], device)
    write_classifier(args.output, ZeroShotClassifier(weights.numpy(), [n.wnid for n in names], [n.name for n in names],
                                                     model.logit_scale(), provenance))
    log.info(f"{Path(args.output)}: {weights.shape[1]} concepts x {len(TEMPLATE_SETS[args.templates])} "
             f"'{args.templates}' templates, {weights.shape[0]}-d on {device}")
    return 0


def check_concepts(args: argparse.Namespace, names) -> None:
    """A table that does not name the concepts of its dataset is refused before anything is written."""
    if not args.concepts:
        return
    others = dict(pair.split("=", 1) for pair in args.other_concepts)
    problem = foreign_concepts(args.names, names, args.named, [w for path in args.concepts for w in read_lines(path)],
                               {dataset: read_lines(path) for dataset, path in others.items()})
    if problem:
        raise NamesTableError(problem)
