"""An open_clip CoCa model as an image captioner: ``arch: open_clip/coca_<name>``.

CoCa (open_clip's ``coca_ViT-B-32``, ``coca_ViT-L-14``, the workflow's tiny
``CoG-demo-CoCa``) is an image-text model with a text decoder. Its captions are decoded here
with torch alone, from the model's own parts: the image tower encodes each image once
(``visual``: pooled latent and image tokens), then, step by step on the growing token
sequence, the text tower embeds the tokens (``text``) and the multimodal decoder
(``text_decoder``) gives the next token's logits at the last position. The loop is ours,
not open_clip's ``CoCa.generate``, which needs the ``transformers`` package; it reproduces
what that method computes with open_clip 3.3's defaults (docs/analyses.md records the
comparison):

* the start token ``<start_of_text>`` and end token ``<end_of_text>`` are the tokenizer's
  (49406 and 49407, generate's defaults), padding is the model's ``pad_id`` (0);
* the end token is forbidden while the sequence, start token included, is shorter than
  ``min_seq_len``; a repetition penalty divides the positive logits of the tokens already
  in the sequence and multiplies their negative ones (1.0: none);
* ``greedy`` takes the most likely token; ``top_k`` and ``top_p`` sample among the
  ``top_k`` most likely tokens or the smallest set whose probability is at least ``top_p``,
  at ``temperature``, from a generator seeded with ``seed`` per batch (``top_k: 1`` is
  greedy). These stop a caption at its end token, and write the end token at ``seq_len``;
* ``beam_search`` is generate's: ``num_beams`` beams in ``num_beam_groups`` groups, each
  group a beam search of ``num_beams / num_beam_groups`` beams. generate adds no diversity
  penalty between groups, so every group repeats the first one's search: the loop runs one
  group (defaults 6 and 3: two beams) and returns what generate returns, at a third of the
  cost. A beam's score is the sum of its tokens' processed logits (generate feeds the
  decoder's logits, not log-probabilities, to the scorer); each step keeps the best
  ``2 x beams`` continuations, a continuation by the end token among the first ``beams``
  becomes a finished caption scored by its sum over its length (start and end tokens
  counted; length penalty 1), the others, up to ``beams``, the next beams. An image is done
  when it has ``beams`` finished captions and none is worse than the best continuation's
  score over the current length (early stopping off); at ``seq_len`` tokens the open beams
  are finished as they stand, without an end token. The best-scored caption is returned
  (on a tie, the one kept last).

A generated ``!`` (token 0, the pad id) ends a sampled caption in generate, not here: it is
a word, and only the end token ends a caption.

The model is built as the image features' and the zero-shot classifier's open_clip models
are (:func:`imagenet_cog.models.open_clip_text.build_text_model`: a pretrained tag, a
checkpoint read tensors-only, or seeded random weights), so that its text tower, the
sentence encoder of class-level captioning (:mod:`imagenet_cog.analyses.captions`), is the
captioner's own. Images are preprocessed as extraction preprocesses this model's images
(open_clip's evaluation transform for the weights), normalised on the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import open_clip
import torch

from imagenet_cog.models.open_clip_text import TextModel, build_text_model
from imagenet_cog.models.registry import (
    ModelSpec,
    Preprocessing,
    is_open_clip_arch,
    is_random_weights,
    planned_preprocessing,
)

GENERATION_TYPES = ("beam_search", "greedy", "top_k", "top_p")
# the tokens open_clip's CLIP tokenizer wraps a text in, and their ids (CoCa.generate's defaults)
START_OF_TEXT = "<start_of_text>"
END_OF_TEXT = "<end_of_text>"
START_ID = 49406
END_ID = 49407


@dataclass(frozen=True)
class Generation:
    """How captions are decoded (the defaults are open_clip's ``CoCa.generate``'s). ``seq_len``
    is the longest caption in tokens, start and end included; the end token is allowed from
    ``min_seq_len`` tokens on (start included). ``seed`` seeds top_k and top_p sampling."""

    generation_type: str = "beam_search"
    seq_len: int = 30
    min_seq_len: int = 5
    num_beams: int = 6
    num_beam_groups: int = 3
    top_k: int = 1
    top_p: float = 0.1
    temperature: float = 1.0
    repetition_penalty: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if self.generation_type not in GENERATION_TYPES:
            raise ValueError(f"generation_type must be one of {', '.join(GENERATION_TYPES)}, "
                             f"not '{self.generation_type}'.")
        if self.seq_len <= self.min_seq_len:
            raise ValueError(f"seq_len ({self.seq_len}) must be larger than min_seq_len ({self.min_seq_len}).")
        if self.generation_type == "beam_search" and self.num_beams % self.num_beam_groups:
            raise ValueError(f"num_beams ({self.num_beams}) must be a multiple of num_beam_groups "
                             f"({self.num_beam_groups}) for beam search.")

    @property
    def beams(self) -> int:
        """The beams searched: one group's (generate's groups all repeat the first)."""
        return self.num_beams // self.num_beam_groups

    def arguments(self) -> dict[str, Any]:
        return {"generation_type": self.generation_type, "seq_len": self.seq_len, "min_seq_len": self.min_seq_len,
                "num_beams": self.num_beams, "num_beam_groups": self.num_beam_groups, "top_k": self.top_k,
                "top_p": self.top_p, "temperature": self.temperature,
                "repetition_penalty": self.repetition_penalty, "seed": self.seed}


@dataclass
class Captioner:
    """A CoCa model (both towers and its decoder, eval mode), its tokenizer and preprocessing."""

    text_model: TextModel
    preprocessing: Preprocessing

    @property
    def network(self):
        return self.text_model.network


def build_captioner(spec: ModelSpec, identity: str | None = None) -> Captioner:
    """``spec``'s CoCa model; any other model is refused with what to name instead."""
    if not is_open_clip_arch(spec.arch):
        raise ValueError(f"captioner '{spec.name}': captions need an open_clip CoCa model "
                         f"(arch: open_clip/coca_ViT-B-32, ...), not arch '{spec.arch}'.")
    text_model = build_text_model(spec, identity)
    if not isinstance(text_model.network, open_clip.CoCa):
        coca = ", ".join(name for name in open_clip.list_models() if "coca" in name.lower())
        raise ValueError(f"captioner '{spec.name}': open_clip's {spec.arch.split('/', 1)[1]} is a "
                         f"{type(text_model.network).__name__}, which has no text decoder; name a CoCa model "
                         f"({coca}).")
    if is_random_weights(spec.weights):
        # open_clip's CoCa decoder leaves its output projection as torch.empty (its
        # init_parameters, never called, fails on an attribute the class lacks): drawn here,
        # right after the seeded build, as that initialiser would, so random weights repeat
        decoder = text_model.network.text_decoder
        torch.nn.init.normal_(decoder.text_projection, std=decoder.width**-0.5)
    return Captioner(text_model, planned_preprocessing(spec))


def decode(tokenizer, tokens: torch.Tensor) -> list[str]:
    """The captions of generated token ids ``[batch, length]``: each cut at its end-of-text
    token (what follows is padding), the start token removed, white space collapsed."""
    texts = []
    for row in tokens.cpu():
        text = open_clip.decode(row) if not hasattr(tokenizer, "decode") else tokenizer.decode(row.tolist())
        text = text.split(END_OF_TEXT, 1)[0].replace(START_OF_TEXT, "")
        texts.append(" ".join(text.split()))
    return texts


def token_ids(tokenizer) -> tuple[int, int]:
    """The start and end token ids of ``tokenizer`` (open_clip's CLIP tokenizer's, else generate's)."""
    return getattr(tokenizer, "sot_token_id", START_ID), getattr(tokenizer, "eot_token_id", END_ID)


def encode_images(network, images: torch.Tensor) -> torch.Tensor:
    """The image tokens the decoder attends to ``[batch, tokens, width]``, computed once."""
    _, image_embs = network.visual(images)
    return image_embs


def next_logits(network, image_embs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The decoder's logits of the token after ``tokens`` ``[rows, length]`` ``[rows, vocab]``."""
    _, token_embs = network.text(tokens)
    return network.text_decoder(image_embs, token_embs)[:, -1]


def processed(logits: torch.Tensor, tokens: torch.Tensor, generation: Generation, end: int) -> torch.Tensor:
    """``logits`` with the end token forbidden below ``min_seq_len`` tokens and the
    repetition penalty applied to the tokens of each row's sequence."""
    logits = logits.clone()
    if tokens.shape[1] < generation.min_seq_len:
        logits[:, end] = -float("inf")
    if generation.repetition_penalty != 1.0:
        seen = logits.gather(1, tokens)
        penalty = generation.repetition_penalty
        logits = logits.scatter(1, tokens, torch.where(seen < 0, seen * penalty, seen / penalty))
    return logits


def sampled(scores: torch.Tensor, generation: Generation, generator: torch.Generator) -> torch.Tensor:
    """One token per row drawn among the top_k or top_p tokens of ``scores`` at ``temperature``."""
    if generation.generation_type == "top_k":
        kth = scores.topk(min(generation.top_k, scores.shape[1]), dim=1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    else:
        ascending, order = scores.sort(dim=1)
        below = ascending.softmax(dim=1).cumsum(dim=1) <= 1 - generation.top_p
        below[:, -1] = False  # the most likely token is always kept
        scores = scores.masked_fill(below.scatter(1, order, below), -float("inf"))
    probabilities = (scores / generation.temperature).softmax(dim=1)
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]


def decode_step_by_step(network, image_embs: torch.Tensor, generation: Generation, start: int, end: int,
                        pad: int) -> torch.Tensor:
    """Greedy or sampled token ids ``[batch, length]``: start token, caption, end token,
    padding; the end token written at ``seq_len``."""
    rows = image_embs.shape[0]
    tokens = torch.full((rows, 1), start, dtype=torch.long, device=image_embs.device)
    ended = torch.zeros(rows, dtype=torch.bool, device=image_embs.device)
    generator = None
    if generation.generation_type != "greedy":
        generator = torch.Generator(device=image_embs.device).manual_seed(generation.seed)
    while tokens.shape[1] < generation.seq_len and not bool(ended.all()):
        scores = processed(next_logits(network, image_embs, tokens), tokens, generation, end)
        if tokens.shape[1] + 1 == generation.seq_len:
            following = torch.full_like(ended, end, dtype=torch.long)
        elif generator is None:
            following = scores.argmax(dim=1)
        else:
            following = sampled(scores, generation, generator)
        following = following.masked_fill(ended, pad)
        tokens = torch.cat([tokens, following[:, None]], dim=1)
        ended |= following == end
    return tokens


class Finished:
    """One image's finished beam-search captions: the ``size`` best by score over length;
    a caption better than the worst kept replaces it."""

    def __init__(self, size: int):
        self.size = size
        self.kept: list[tuple[float, torch.Tensor]] = []
        self.worst = 1e9

    def add(self, tokens: torch.Tensor, score: float, length: int) -> None:
        normalised = score / length
        if len(self.kept) >= self.size and normalised <= self.worst:
            return
        self.kept.append((normalised, tokens))
        if len(self.kept) > self.size:
            ranked = sorted((kept_score, index) for index, (kept_score, _) in enumerate(self.kept))
            del self.kept[ranked[0][1]]
            self.worst = ranked[1][0]
        else:
            self.worst = min(self.worst, normalised)

    def done(self, best_score: float, length: int) -> bool:
        """No open beam can do better: enough finished captions, none worse than the best
        continuation's score over ``length``."""
        return len(self.kept) >= self.size and self.worst >= best_score / length

    def best(self) -> torch.Tensor:
        """The best caption's tokens (on a tie, the one kept last)."""
        return max(enumerate(self.kept), key=lambda item: (item[1][0], item[0]))[1][1]


def beam_search(network, image_embs: torch.Tensor, generation: Generation, start: int, end: int,
                pad: int) -> torch.Tensor:
    """Beam-search token ids ``[batch, length]``: start token, caption, end token (none for
    a caption cut at ``seq_len``), padding."""
    images, beams, device = image_embs.shape[0], generation.beams, image_embs.device
    image_embs = image_embs.repeat_interleave(beams, dim=0)
    tokens = torch.full((images * beams, 1), start, dtype=torch.long, device=device)
    # only the first beam of an image is open at the start: the others would repeat it
    scores = torch.full((images, beams), -1e9, device=device)
    scores[:, 0] = 0
    scores = scores.view(-1)
    finished = [Finished(beams) for _ in range(images)]
    done = [False] * images
    while True:
        candidates = processed(next_logits(network, image_embs, tokens), tokens, generation, end)
        vocabulary = candidates.shape[1]
        candidates = (candidates + scores[:, None].to(candidates.dtype)).view(images, beams * vocabulary)
        best, flat = candidates.topk(2 * beams, dim=1)
        length = tokens.shape[1] + 1
        best_host, flat_host = best.tolist(), flat.tolist()
        next_scores, next_tokens, next_rows = [], [], []
        for image in range(images):
            if done[image]:
                next_scores += [0.0] * beams
                next_tokens += [pad] * beams
                next_rows += [image * beams] * beams
                continue
            kept = 0
            for rank, (score, index) in enumerate(zip(best_host[image], flat_host[image])):
                row, token = image * beams + index // vocabulary, index % vocabulary
                if token == end:
                    if rank < beams:
                        finished[image].add(tokens[row], score, length)
                else:
                    next_scores.append(score)
                    next_tokens.append(token)
                    next_rows.append(row)
                    kept += 1
                    if kept == beams:
                        break
            done[image] = finished[image].done(best_host[image][0], length)
        scores = torch.tensor(next_scores, dtype=scores.dtype, device=device)
        rows = torch.tensor(next_rows, dtype=torch.long, device=device)
        tokens = torch.cat([tokens[rows], torch.tensor(next_tokens, device=device)[:, None]], dim=1)
        if all(done) or tokens.shape[1] >= generation.seq_len:
            break
    for image in range(images):
        if not done[image]:
            for row in range(image * beams, (image + 1) * beams):
                finished[image].add(tokens[row], scores[row].item(), tokens.shape[1])
    chosen = [finished[image].best() for image in range(images)]
    width = min(max(len(row) for row in chosen) + 1, generation.seq_len)
    out = torch.full((images, width), pad, dtype=torch.long, device=device)
    for image, row in enumerate(chosen):
        out[image, :len(row)] = row
        if len(row) < width:
            out[image, len(row)] = end
    return out


def generate(network, images: torch.Tensor, generation: Generation, tokenizer=None) -> torch.Tensor:
    """Token ids ``[batch, length]`` of the captions of normalised ``images`` by ``network``, a
    CoCa model, on the images' device."""
    start, end = token_ids(tokenizer)
    if generation.seq_len > network.text.context_length:
        raise ValueError(f"seq_len ({generation.seq_len}) is longer than the model's context "
                         f"({network.text.context_length} tokens).")
    with torch.inference_mode():
        image_embs = encode_images(network, images)
        if generation.generation_type == "beam_search":
            return beam_search(network, image_embs, generation, start, end, network.pad_id)
        return decode_step_by_step(network, image_embs, generation, start, end, network.pad_id)


def caption(captioner: Captioner, pixels: torch.Tensor, device: torch.device, generation: Generation) -> list[str]:
    """Captions of a batch of preprocessed uint8 images ``[batch, 3, size, size]``."""
    network = captioner.network.to(device).eval()
    p = captioner.preprocessing
    mean = torch.tensor(p.mean, device=device).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(p.std, device=device).view(1, 3, 1, 1) * 255.0
    images = (pixels.to(device).float() - mean) / std
    tokens = generate(network, images, generation, captioner.text_model.tokenizer)
    return decode(captioner.text_model.tokenizer, tokens)
