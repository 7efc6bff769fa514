"""Class-level captioning (Laina et al. 2020, Sec. 4): a description of each concept or
cluster, written by a captioner, for the describability of Eq. 3 without human writers.

``caption-images``: a pretrained captioner (an open_clip CoCa model,
:mod:`imagenet_cog.models.open_clip_captioner`) captions the test images of a dataset, the
first ``--per-group`` of each concept in the split table's order (all by default). Written
once per captioner and dataset, as ``path<TAB>group<TAB>caption`` with the concept's wnid as
the group; an image its decoder refuses is left out and logged, as many as
``data.max_undecodable_fraction`` allows (:mod:`imagenet_cog.core.undecodable`).

``auto-descriptions``: the description of each group is the caption of Eq. 4, with the
cosine distance ``d(s, s') = 1 - cos(psi(s), psi(s'))`` between the captioner's own text
tower's embeddings ``psi``::

    D_c = argmin_{s in S_c} [ 1/|S_c| sum_{s+ in S_c minus s} d(s, s+)
                              - 1/|S \\ S_c| sum_{s- in S \\ S_c} d(s, s-) ]

(the intra-group sum is divided by ``|S_c|``, as the paper writes it, not by ``|S_c| - 1``).
The ``score`` written is the bracket negated: the mean distance to the other groups'
captions minus the intra-group term, so the description has the group's largest score. The
groups are the captions file's (concepts), or, with ``--assignments`` (the k-means
assignments of the analyses stage), the clusters ``cluster-<k>`` of the captioned images,
the paper's own setting for self-supervised groupings: the images are captioned once,
whatever groups them. Output ``group<TAB>description<TAB>score<TAB>captions`` (how many
captions the group has), the groups in sorted order.
"""

from __future__ import annotations

import argparse
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.utils.data

from imagenet_cog.core.command_line import add_compute_options, setup_logging
from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import read_tsv, write_tsv
from imagenet_cog.core.undecodable import UndecodableImages, UndecodableImagesError
from imagenet_cog.features.extract import (
    ImageRows,
    SplitImages,
    add_image_arguments,
    add_model_arguments,
    checked_identity,
    collate,
    model_spec_of,
    split_reader,
    split_rows,
)
from imagenet_cog.models.open_clip_captioner import Generation, build_captioner, caption
from imagenet_cog.models.open_clip_text import build_text_model, text_embeddings

log = logging.getLogger("imagenet_cog.analyses.captions")

CAPTION_COLUMNS = ("path", "group", "caption")
DESCRIPTION_COLUMNS = ("group", "description", "score", "captions")
ASSIGNMENT_COLUMNS = ("path", "cluster")
CLUSTER_PREFIX = "cluster-"


class CaptionInputError(ExplainedError, ValueError):
    """An input file is not what the command reads; the message names it and the fix."""


def cluster_group(cluster: int | str) -> str:
    return f"{CLUSTER_PREFIX}{cluster}"


# caption-images ---------------------------------------------------------------------------
def test_rows(split_table: Path, per_group: int | None) -> list[dict]:
    """The split's test rows, the first ``per_group`` of each concept (all when None)."""
    rows = split_rows(split_table, "test")
    if not rows:
        raise CaptionInputError(f"{split_table}: no test rows to caption; delete it and re-run the splits stage.")
    if not per_group:
        return rows
    counts: dict[str, int] = defaultdict(int)
    kept = []
    for row in rows:
        if counts[row["wnid"]] < per_group:
            counts[row["wnid"]] += 1
            kept.append(row)
    return kept


def caption_split(captioner, images: SplitImages, rows: list[dict], generation: Generation, device: torch.device,
                  batch_size: int, num_workers: int) -> list[tuple[str, str, str]]:
    """``(path, wnid, caption)`` of every decodable image of ``rows``, in their order."""
    paths = [row["path"] for row in rows]
    dataset = ImageRows(images.image_root, paths, captioner.preprocessing, split_reader(images, paths))
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate)
    written = []
    undecodable = UndecodableImages(len(paths), f"{images.dataset}'s test split", consequence="not captioned")
    for pixels, positions, errors in loader:
        valid = [not error for error in errors]
        for position, error in zip(positions.tolist(), errors):
            if error:
                undecodable.add(dataset.describe(position), error)
        if not any(valid):
            continue
        kept = positions[torch.tensor(valid)].tolist()
        texts = caption(captioner, pixels[torch.tensor(valid)], device, generation)
        written += [(paths[position], rows[position]["wnid"], text) for position, text in zip(kept, texts)]
        log.info("captioned %d of %d images", len(written), len(paths))
    undecodable.check()
    return written


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Generation()
    parser.add_argument("--generation-type", default=defaults.generation_type,
                        help="beam_search (open_clip's CoCa.generate's), greedy, top_k or top_p sampling")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len, help="longest caption in tokens")
    parser.add_argument("--min-seq-len", type=int, default=defaults.min_seq_len)
    parser.add_argument("--num-beams", type=int, default=defaults.num_beams)
    parser.add_argument("--num-beam-groups", type=int, default=defaults.num_beam_groups)
    parser.add_argument("--top-k", type=int, default=defaults.top_k)
    parser.add_argument("--top-p", type=float, default=defaults.top_p)
    parser.add_argument("--temperature", type=float, default=defaults.temperature)
    parser.add_argument("--repetition-penalty", type=float, default=defaults.repetition_penalty)
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seeds top_k and top_p sampling, per batch")


def generation_of(args: argparse.Namespace) -> Generation:
    return Generation(args.generation_type, args.seq_len, args.min_seq_len, args.num_beams, args.num_beam_groups,
                      args.top_k, args.top_p, args.temperature, args.repetition_penalty, args.seed)


def parsed_arguments(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """A captioning command's arguments, its log set up and PyTorch's threads set (--threads)."""
    args = parser.parse_args(argv)
    setup_logging()
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def caption_images_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="caption-images",
                                     description="Caption a dataset's test images with an open_clip CoCa model.")
    add_model_arguments(parser)
    add_image_arguments(parser)
    add_generation_arguments(parser)
    parser.add_argument("--per-group", type=int, default=0, help="first N test images of each concept (0: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=0)
    add_compute_options(parser, "the CoCa model captions the images", threads=None)
    parser.add_argument("--output", required=True, type=Path, help="captions TSV: path, group, caption")
    args = parsed_arguments(parser, argv)
    try:
        generation = generation_of(args)
        spec = model_spec_of(args)
        device = resolve_device(args.device, "analyses.device")
        images = SplitImages(args.split_table, args.image_root, args.dataset, "test", args.image_layout,
                             args.image_index)
        rows = test_rows(args.split_table, args.per_group)
        captioner = build_captioner(spec, checked_identity(spec, args.weights_identity))
    except (CaptionInputError, ValueError) as error:
        log.error("%s", error)
        return 1
    for note in captioner.text_model.notes:
        log.info(note)
    log.info("captioning %d test images of %s on %s: %s", len(rows), args.dataset, device, generation.arguments())
    try:
        written = caption_split(captioner, images, rows, generation, device, args.batch_size, args.num_workers)
    except UndecodableImagesError as error:
        log.error("%s", error)
        return 1
    write_tsv(args.output, CAPTION_COLUMNS, written)
    log.info("wrote %d captions to %s", len(written), args.output)
    return 0


# auto-descriptions (Eq. 4) -----------------------------------------------------------------
@dataclass(frozen=True)
class Description:
    group: str
    description: str
    score: float
    captions: int


def select_descriptions(groups: list[str], captions: list[str], embeddings: np.ndarray) -> list[Description]:
    """Eq. 4 for every group: ``embeddings`` are the captions' L2-normalised sentence
    embeddings, ``[captions, width]``. The sums of cosine similarities are the dot products
    with each group's summed embeddings, so no captions x captions matrix is formed. Ties go
    to the first caption in the given order."""
    if len(groups) != len(captions) or len(captions) != len(embeddings):
        raise ValueError(f"{len(groups)} groups, {len(captions)} captions, {len(embeddings)} embeddings")
    names = sorted(set(groups))
    if len(names) < 2:
        raise CaptionInputError(f"Eq. 4 contrasts a group's captions with the other groups': there is only "
                                f"{len(names)} group ({', '.join(names)}).")
    vectors = np.asarray(embeddings, dtype=np.float64)
    total = vectors.sum(axis=0)
    member_of = np.array(groups)
    chosen = []
    for name in names:
        members = np.flatnonzero(member_of == name)
        own, others = len(members), len(captions) - len(members)
        rows = vectors[members]
        own_sum = rows.sum(axis=0)
        # sum of cosine similarities to the group's other captions, and to the other groups'
        intra_similarity = rows @ own_sum - np.einsum("ij,ij->i", rows, rows)
        inter_similarity = rows @ (total - own_sum)
        intra_distance = ((own - 1) - intra_similarity) / own
        inter_distance = (others - inter_similarity) / others
        scores = inter_distance - intra_distance
        best = int(np.argmax(scores))
        chosen.append(Description(name, captions[members[best]], float(scores[best]), own))
    return chosen


def read_captions(path: Path) -> list[dict]:
    rows = read_tsv(path)
    if not rows or not set(CAPTION_COLUMNS) <= set(rows[0]):
        found = ", ".join(rows[0]) if rows else "no rows"
        raise CaptionInputError(f"{path}: expected a captions TSV with the columns {', '.join(CAPTION_COLUMNS)} "
                                f"and a row per image (found {found}); delete it and re-run caption-images.")
    return rows


def cluster_groups(rows: list[dict], assignments: Path) -> list[str]:
    """The cluster ``cluster-<k>`` of each captioned image, from k-means assignments."""
    table = read_tsv(assignments)
    if not table or not set(ASSIGNMENT_COLUMNS) <= set(table[0]):
        raise CaptionInputError(f"{assignments}: expected the k-means assignments TSV (columns path, label, "
                                f"cluster) that analyses-kmeans writes; delete it and re-run the k-means analysis.")
    cluster_of = {row["path"]: row["cluster"] for row in table}
    missing = [row["path"] for row in rows if row["path"] not in cluster_of]
    if missing:
        raise CaptionInputError(f"{assignments}: {len(missing)} captioned images have no cluster (first: {missing[0]}); "
                                f"the captions and the clustering are of different test splits: delete the older "
                                f"of the two and re-run.")
    return [cluster_group(cluster_of[row["path"]]) for row in rows]


def auto_descriptions_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="auto-descriptions",
                                     description="Each group's description by Eq. 4 of Laina et al. 2020.")
    add_model_arguments(parser)
    parser.add_argument("--captions", required=True, type=Path, help="captions TSV of caption-images")
    parser.add_argument("--assignments", type=Path, default=None,
                        help="k-means assignments TSV: group the captions by cluster instead of concept")
    parser.add_argument("--batch-size", type=int, default=256, help="captions the text tower encodes at once")
    add_compute_options(parser, "the text tower embeds the captions", threads=None)
    parser.add_argument("--output", required=True, type=Path, help="descriptions TSV: group, description, score, captions")
    args = parsed_arguments(parser, argv)
    try:
        rows = read_captions(args.captions)
        groups = cluster_groups(rows, args.assignments) if args.assignments else [row["group"] for row in rows]
        if len(set(groups)) < 2:
            raise CaptionInputError(f"{args.captions}: Eq. 4 needs captions of at least two groups; it has "
                                    f"{len(set(groups))}.")
        spec = model_spec_of(args)
        device = resolve_device(args.device, "analyses.device")
        text_model = build_text_model(spec, checked_identity(spec, args.weights_identity))
    except (CaptionInputError, ValueError) as error:
        log.error("%s", error)
        return 1
    captions = [row["caption"] for row in rows]
    embeddings = text_embeddings(text_model, captions, device, args.batch_size).numpy()
    descriptions = select_descriptions(groups, captions, embeddings)
    write_tsv(args.output, DESCRIPTION_COLUMNS,
              [(d.group, d.description, f"{d.score:.6f}", d.captions) for d in descriptions])
    log.info("wrote the descriptions of %d groups (%d captions) to %s", len(descriptions), len(captions), args.output)
    return 0
