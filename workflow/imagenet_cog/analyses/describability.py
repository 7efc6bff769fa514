"""Describability answered by an image-text model (Laina et al. 2020, Eq. 3 and Tab. 2).

The rater sheets' describability tasks (:mod:`.raters`) give a rater a description
``D_c`` of a concept and two query images, one of the concept and one negative (a random
or a hard one), and ask which image the description fits: ``z = h(D_c, x_z, x_{1-z})``.
An open_clip model answers the same tasks, read from the sheets' answer key:

* the description is embedded by the model's text tower as the raters read it, the raw
  text with no prompt template around it (a template such as "a photo of {}" would ask
  the model something the raters were not asked), and L2-normalised; the tokenizer cuts a
  text at its context length (77 tokens for CLIP's), which the result counts;
* each query image is the image the sheet shows: its test feature, the model's image
  *embedding* (``image_features: embedding``), L2-normalised; the pooled features live
  before the image projection, not in the text tower's space, and are refused;
* the model answers the query whose cosine similarity to the description is the higher;
  an exact tie is settled by a coin seeded by the task and the source.

Each task is answered once per description source (:mod:`.descriptions`): the WordNet
gloss, and, when a captioner's file is given (``--descriptions``), the automatic
description. Per dataset (a level), description source and negative kind: accuracy with
the Clopper-Pearson 95% interval the learnability analysis uses
(:func:`.learnability.clopper_pearson`). Per task: both similarities, the model's choice
and the key's answer, in a TSV beside the key's task ids, so that the model's answers can
be set against raters' (``score-raters`` scores those); :mod:`.describability_table`
tabulates both per level.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from imagenet_cog.core.command_line import add_open_clip_model_options, setup_logging
from imagenet_cog.core.device import DeviceError, resolve_device
from imagenet_cog.core.io import write_json, write_tsv
from imagenet_cog.core.sampling import derived_rng
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.models.open_clip_catalogue import EMBEDDING, POOLED
from imagenet_cog.models.open_clip_text import TextModel, build_text_model
from imagenet_cog.models.registry import ModelSpec, is_open_clip_arch, weights_identity
from imagenet_cog.models.series import resolve_weights
from imagenet_cog.models.timm_models import PretrainedWeightsUnavailable

from .common import AnalysisInputError, l2_normalised, load_split, metric, provenance
from .descriptions import AUTO, GLOSS, DescriptionError, read_auto_descriptions
from .learnability import clopper_pearson
from .raters import CHOICES, DESCRIBABILITY, NEGATIVE_KINDS, RaterError, read_catalogue, read_keys

log = logging.getLogger("imagenet_cog.analyses.describability")

ANALYSIS = "model_describability"
ANSWER_COLUMNS = (
    "task", "dataset", "negatives", "page", "wnid", "negative_wnid", "source", "description",
    "answer", "model_choice", "similarity_a", "similarity_b", "correct",
)
# descriptions the text tower encodes at once
TEXT_BATCH = 256


@dataclass(frozen=True)
class Question:
    """One describability task of the key: the concept, the negative's concept, the two
    query images in the order the sheet shows them and the right choice."""

    task: str
    dataset: str
    negatives: str
    page: str
    wnid: str
    negative_wnid: str
    answer: str
    query_a: str
    query_b: str


def describability_questions(key: str | os.PathLike, dataset: str) -> list[Question]:
    """The describability tasks of ``dataset`` in a rater key, in the key's order."""
    rows = [row for row in read_keys([key]).values() if row["variant"] == DESCRIBABILITY and row["dataset"] == dataset]
    if not rows:
        raise AnalysisInputError(
            f"{key}: no describability task of dataset {dataset}; the sheets must include the describability "
            f"variant (analyses.raters.variants)."
        )
    return [Question(row["task"], row["dataset"], row["negatives"], row["page"], row["wnid"], row["negative_wnid"],
                     row["answer"], row["query_a"], row["query_b"]) for row in rows]


def model_choices(texts: np.ndarray, images_a: np.ndarray, images_b: np.ndarray,
                  ties: Sequence[tuple[object, ...]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per row: the query (A or B) whose image embedding has the higher cosine similarity to
    the description's text embedding, and both similarities. Every input is L2-normalised
    here; ``ties``: per row the keys of the coin that settles an exact tie."""
    texts, images_a, images_b = (l2_normalised(np.asarray(array, dtype=np.float32)) for array in (texts, images_a, images_b))
    similarity_a = (texts * images_a).sum(axis=1)
    similarity_b = (texts * images_b).sum(axis=1)
    choices = []
    for a, b, keys in zip(similarity_a, similarity_b, ties):
        if a == b:
            choices.append(CHOICES[int(derived_rng("tie", *keys).integers(2))])
        else:
            choices.append(CHOICES[0] if a > b else CHOICES[1])
    return choices, similarity_a, similarity_b


def accuracy_records(rows: Sequence[Mapping[str, object]], sources: Sequence[str]) -> tuple[list[dict], dict]:
    """Metric records ``describability_<source>_<negatives>`` (accuracy, Clopper-Pearson 95%)
    and the counts behind them."""
    records, counts = [], {}
    for source in sources:
        for negatives in NEGATIVE_KINDS:
            outcomes = [bool(row["correct"]) for row in rows if row["source"] == source and row["negatives"] == negatives]
            if not outcomes:
                continue
            name = f"describability_{source}_{negatives}"
            low, high = clopper_pearson(sum(outcomes), len(outcomes))
            records.append(metric(name, sum(outcomes) / len(outcomes), low, high))
            counts[name] = {"correct": sum(outcomes), "tasks": len(outcomes)}
    return records, counts


# the model's side -----------------------------------------------------------------------
def text_tower_spec(args: argparse.Namespace) -> ModelSpec:
    """The model's spec; refused unless it is an open_clip model giving its image embedding."""
    entry = {"arch": args.arch, "weights": resolve_weights(args.weights), "trusted_globals": args.trusted_globals}
    spec = ModelSpec.from_config(args.model_name, {**entry, **({"image_features": args.image_features}
                                                                if args.image_features else {})})
    if not is_open_clip_arch(spec.arch):
        raise AnalysisInputError(
            f"model '{spec.name}': describability answered by a model needs an image-text model "
            f"(arch: open_clip/<name>), not arch '{spec.arch}'.")
    if spec.open_clip_model(check_weights=False).image_features == POOLED:
        raise AnalysisInputError(
            f"model '{spec.name}' gives its pooled image features (image_features: {POOLED}), which come before "
            f"the image projection and are not in its text tower's space; set image_features: {EMBEDDING} "
            f"(the default) in its config.yaml entry to compare its images with descriptions.")
    return spec


def check_features(metadata: Mapping[str, object], identity: str, where: str) -> None:
    """The test features must be this model's image embeddings, with these weights."""
    extracted = metadata.get("image_features")
    if extracted is not None and extracted != EMBEDDING:
        raise AnalysisInputError(
            f"{where}: the features are the model's {extracted} image features, not its {EMBEDDING}; set "
            f"image_features: {EMBEDDING} for the model and extract its features again.")
    if metadata.get("weights") not in (None, identity):
        raise AnalysisInputError(
            f"{where}: the features were extracted with weights {metadata['weights']}, the text tower would have "
            f"{identity}; extract the features again (delete them and re-run Snakemake).")


def embed_texts(model: TextModel, texts: Sequence[str], device, batch: int = TEXT_BATCH) -> tuple[np.ndarray, int]:
    """The text tower's L2-normalised embeddings of ``texts`` (raw, no template), float32, and
    how many texts filled the whole context (cut, or just fitting)."""
    network = model.network.to(device)
    embeddings, full = [], 0
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            tokens = model.tokenizer(list(texts[start : start + batch]))
            full += int((tokens[:, -1] != 0).sum())
            embeddings.append(network.encode_text(tokens.to(device), normalize=True).float().cpu().numpy())
    return np.concatenate(embeddings), full


def source_descriptions(questions: Sequence[Question], catalogue: str, descriptions: str | None) -> dict[str, dict[str, str]]:
    """source -> wnid -> description for every concept of the questions."""
    wnids = sorted({question.wnid for question in questions})
    texts = {GLOSS: {wnid: gloss for wnid, (_, gloss) in read_catalogue(catalogue, wnids).items() if wnid in wnids}}
    if descriptions:
        texts[AUTO] = read_auto_descriptions(descriptions, wnids)
    return texts


def query_features(split, questions: Sequence[Question], where: str) -> tuple[np.ndarray, np.ndarray]:
    """The L2-normalised test features of each question's query images A and B."""
    rows = {path: row for row, path in enumerate(split.paths)}
    missing = sorted({path for question in questions for path in (question.query_a, question.query_b)} - set(rows))
    if missing:
        raise AnalysisInputError(
            f"{where}: no valid test feature for {len(missing)} image(s) the sheets show ({', '.join(missing[:3])}); "
            f"the key and the features come from different split tables: re-run Snakemake.")
    features = l2_normalised(split.features)
    return (features[[rows[question.query_a] for question in questions]],
            features[[rows[question.query_b] for question in questions]])


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog model-describability",
        description="Answer the rater sheets' describability tasks with an open_clip model: the query image "
                    "whose embedding is nearer the description's text embedding (Laina et al. 2020, Eq. 3).",
    )
    parser.add_argument("--key", required=True, help="the rater sheets' answer key (key.tsv) of the dataset")
    parser.add_argument("--catalogue", required=True, help="wnid, name, gloss TSV")
    parser.add_argument("--descriptions", help="automatic descriptions TSV (group, description, score, captions)")
    parser.add_argument("--test", required=True, help="the model's test features of the dataset (HDF5)")
    add_open_clip_model_options(parser, "answers the describability tasks")
    parser.add_argument("--image-features", help=f"the model's image features (open_clip: {EMBEDDING}, the default)")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--answers", required=True, help="per task and description source TSV")
    parser.add_argument("--output", required=True, help="result JSON")
    return parser.parse_args(argv)


def model_describability_command(argv: list[str]) -> int:
    setup_logging(to_stdout=True)
    args = _arguments(argv)
    try:
        spec = text_tower_spec(args)
        questions = describability_questions(args.key, args.dataset)
        texts = source_descriptions(questions, args.catalogue, args.descriptions)
        split = load_split(args.test)
        identity = weights_identity(spec)
        check_features(split.metadata, identity, args.test)
        images_a, images_b = query_features(split, questions, args.test)
        device = resolve_device(args.device, "analyses.device")
        model = build_text_model(spec, identity)
    except (AnalysisInputError, RaterError, DescriptionError, ValueError, OSError, PretrainedWeightsUnavailable,
            DeviceError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    log.info("\n".join(model.notes))
    rows, filled = [], {}
    for source, descriptions in texts.items():
        wnids = sorted(descriptions)
        embedded, filled[source] = embed_texts(model, [descriptions[wnid] for wnid in wnids], device)
        if embedded.shape[1] != images_a.shape[1]:
            print(f"error: {args.test}: {images_a.shape[1]}-d image features, but the text tower embeds "
                  f"{embedded.shape[1]}-d; are they this model's image embeddings?", file=sys.stderr)
            return 1
        by_wnid = dict(zip(wnids, embedded))
        choices, similarity_a, similarity_b = model_choices(
            np.stack([by_wnid[question.wnid] for question in questions]), images_a, images_b,
            [(question.task, source) for question in questions])
        for question, choice, a, b in zip(questions, choices, similarity_a, similarity_b):
            rows.append({"task": question.task, "dataset": question.dataset, "negatives": question.negatives,
                         "page": question.page, "wnid": question.wnid, "negative_wnid": question.negative_wnid,
                         "source": source, "description": descriptions[question.wnid], "answer": question.answer,
                         "model_choice": choice, "similarity_a": f"{a:.6f}", "similarity_b": f"{b:.6f}",
                         "correct": int(choice == question.answer)})
    write_tsv(args.answers, ANSWER_COLUMNS, ([row[column] for column in ANSWER_COLUMNS] for row in rows))
    records, counts = accuracy_records(rows, list(texts))
    write_json(args.output, {
        "analysis": ANALYSIS,
        "model": args.model_name,
        "dataset": args.dataset,
        "random_weights": bool(split.metadata.get("random_weights")),
        "metrics": records,
        "counts": counts,
        "interval": "Clopper-Pearson 95% (exact binomial) over the dataset's describability tasks",
        "settings": {
            "sources": list(texts),
            "text": "the description as raters read it, no prompt template; L2-normalised text embedding",
            "images": "the two query images each task shows (their test features, L2-normalised image embeddings)",
            "choice": "the query of higher cosine similarity to the text; an exact tie by a coin seeded by task and source",
            "texts_filling_the_context": filled,
        },
        "key": str(args.key),
        "descriptions": str(args.descriptions) if args.descriptions else None,
        "weights": identity,
        "test": provenance(split),
        "versions": stack_versions(),
    })
    for record in records:
        log.info(f"{args.model_name} {args.dataset} {record['metric']}: {record['value']:.3f} "
                 f"[{record['low']:.3f}, {record['high']:.3f}] ({counts[record['metric']]['tasks']} tasks)")
    return 0
