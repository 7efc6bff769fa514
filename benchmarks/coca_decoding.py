"""Our CoCa decoding (``imagenet_cog.models.open_clip_captioner.generate``) against open_clip's
``CoCa.generate`` on the same model and images: token ids compared row by row, wall time of each.

open_clip's generate imports the ``transformers`` package, which the workflow does not install;
put a ``transformers`` below 5 (4.40 to 4.56 export the beam scorer where open_clip 3.3 looks)
on the path to run this. A CoCa config at seeded random weights (the workflow's tiny
``CoG-demo-CoCa`` by default, or any open_clip CoCa: ``--arch open_clip/coca_ViT-B-32``)
captions generated images: random pixels and smooth colour gradients.

    PYTHONPATH=workflow:/path/to/transformers python benchmarks/coca_decoding.py
    PYTHONPATH=workflow:/path/to/transformers python benchmarks/coca_decoding.py --arch open_clip/coca_ViT-B-32 \\
        --images 4 --seeds 1
"""

from __future__ import annotations

import argparse
import time

import torch

from imagenet_cog.models.open_clip_captioner import END_ID, Generation, build_captioner, generate
from imagenet_cog.models.registry import ModelSpec


def generated_images(count: int, size: int, seed: int) -> torch.Tensor:
    """Normalised-scale images: half random pixels, half smooth gradients of random colours."""
    rng = torch.Generator().manual_seed(seed)
    noise = torch.randn(count - count // 2, 3, size, size, generator=rng)
    ramp = torch.linspace(-1.5, 1.5, size)
    colours = torch.randn(count // 2, 3, 1, 1, generator=rng)
    gradients = colours * (ramp.view(1, 1, size, 1) + ramp.view(1, 1, 1, size)) / 2
    return torch.cat([noise, gradients])


def open_clip_tokens(network, images: torch.Tensor, generation: Generation) -> torch.Tensor:
    arguments = generation.arguments()
    arguments.pop("seed")
    if arguments["generation_type"] == "greedy":
        arguments.update(generation_type="top_k", top_k=1)
    with torch.no_grad():
        return network.generate(images, **arguments)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="open_clip/CoG-demo-CoCa")
    parser.add_argument("--seeds", type=int, default=3, help="random weights random:0 .. random:<seeds - 1>")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=30)
    parser.add_argument("--min-seq-len", type=int, default=5)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--early-end", action="store_true",
                        help="random weights rarely choose the end token: give it the decoder's output column of the "
                             "token greedy decoding writes most (x 1.001), so captions end at many lengths")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    settings = {
        "greedy": Generation("greedy", args.seq_len, args.min_seq_len, repetition_penalty=args.repetition_penalty),
        "beam_search 6/3": Generation("beam_search", args.seq_len, args.min_seq_len,
                                      repetition_penalty=args.repetition_penalty),
        "beam_search 4/1": Generation("beam_search", args.seq_len, args.min_seq_len, num_beams=4, num_beam_groups=1,
                                      repetition_penalty=args.repetition_penalty),
    }
    equal_rows = total_rows = 0
    for seed in range(args.seeds):
        captioner = build_captioner(ModelSpec.from_config("coca", {"arch": args.arch, "weights": f"random:{seed}"}))
        network = captioner.network.eval()
        images = generated_images(args.images, captioner.preprocessing.size, seed)
        if args.early_end:
            greedy = generate(network, images, settings["greedy"], captioner.text_model.tokenizer)
            frequent = greedy[:, 1:].flatten().bincount().argmax()
            projection = network.text_decoder.text_projection
            projection.data[:, END_ID] = projection.data[:, frequent] * 1.001
        for name, generation in settings.items():
            begin = time.perf_counter()
            ours = generate(network, images, generation, captioner.text_model.tokenizer)
            middle = time.perf_counter()
            theirs = open_clip_tokens(network, images, generation)
            end = time.perf_counter()
            same = [ours.shape[1] == theirs.shape[1] and bool((ours[i] == theirs[i]).all())
                    for i in range(len(images))]
            equal_rows += sum(same)
            total_rows += len(same)
            early = sum(END_ID in row[:-1] for row in ours.tolist())
            print(f"random:{seed} {name}: {sum(same)}/{len(same)} rows equal ({early} ended before seq_len), "
                  f"shapes {tuple(ours.shape)} "
                  f"{tuple(theirs.shape)}; ours {middle - begin:.2f} s, open_clip {end - middle:.2f} s")
            for i in (i for i, equal in enumerate(same) if not equal):
                print(f"  image {i}: ours {ours[i].tolist()}\n  image {i}: open_clip {theirs[i].tolist()}")
    print(f"{args.arch}: {equal_rows}/{total_rows} captions token for token equal")


if __name__ == "__main__":
    main()
