"""Class-level captioning (Laina et al. 2020, Sec. 4): the tiny CoCa at random weights
captions generated images through the command (nothing downloaded), its decoding checked
against the model's own logits, and Eq. 4 picks the hand-computed description of fixed
embeddings. (Token for token equality with open_clip's CoCa.generate, which needs the
transformers package, is checked by benchmarks/coca_decoding.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_world
from imagenet_cog.analyses.captions import (
    auto_descriptions_command,
    caption_images_command,
    select_descriptions,
)
from imagenet_cog.core.io import read_tsv
from imagenet_cog.core.undecodable import LIMIT_VARIABLE
from imagenet_cog.models.open_clip_captioner import END_ID, START_ID, Generation, build_captioner, decode, generate
from imagenet_cog.models.registry import ModelSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ["--model-name", "coca", "--arch", "open_clip/CoG-demo-CoCa", "--weights", "random:3"]
# greedy and short: seconds on a CPU
FAST = ["--generation-type", "greedy", "--seq-len", "8", "--min-seq-len", "2"]


def test_eq4_picks_the_hand_computed_descriptions():
    # Group a: a1=(1,0), a2=(.8,.6), a3=(0,1); group b: b1=(0,1), b2=(-1,0); d = 1 - cos.
    # a1: intra (0.2 + 1)/3 = 0.4,   inter (1 + 2)/2 = 1.5,        score 1.1
    # a2: intra (0.2 + 0.4)/3 = 0.2, inter (0.4 + 1.8)/2 = 1.1,    score 0.9
    # a3: intra (1 + 0.4)/3,         inter (0 + 1)/2 = 0.5,        score 0.5 - 1.4/3 = 0.0333
    # b1: intra 1/2 = 0.5,           inter (1 + 0.4 + 0)/3,        score 1.4/3 - 0.5 = -0.0333
    # b2: intra 1/2 = 0.5,           inter (2 + 1.8 + 1)/3 = 1.6,  score 1.1
    # a2, the most central caption of a, loses to a1, the one farthest from b's.
    groups = ["a", "b", "a", "a", "b"]
    captions = ["a1", "b1", "a2", "a3", "b2"]
    embeddings = np.array([[1, 0], [0, 1], [0.8, 0.6], [0, 1], [-1, 0]])
    chosen = select_descriptions(groups, captions, embeddings)
    assert [(d.group, d.description, d.captions) for d in chosen] == [("a", "a1", 3), ("b", "b2", 2)]
    assert [d.score for d in chosen] == pytest.approx([1.1, 1.1])


def test_eq4_on_every_caption_against_the_direct_formula():
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(9, 4))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    groups = ["x", "y", "z", "x", "y", "z", "x", "x", "y"]
    distance = 1 - embeddings @ embeddings.T
    for chosen in select_descriptions(groups, [str(i) for i in range(9)], embeddings):
        members = [i for i, group in enumerate(groups) if group == chosen.group]
        others = [i for i, group in enumerate(groups) if group != chosen.group]
        scores = [distance[i, others].mean() - sum(distance[i, j] for j in members if j != i) / len(members)
                  for i in members]
        assert chosen.description == str(members[int(np.argmax(scores))])
        assert chosen.score == pytest.approx(max(scores))


def test_eq4_needs_two_groups():
    with pytest.raises(ValueError, match="only 1 group"):
        select_descriptions(["a", "a"], ["x", "y"], np.eye(2))


def test_the_captioner_refuses_a_model_without_a_decoder():
    with pytest.raises(ValueError, match="no text decoder.*CoG-demo-CoCa"):
        build_captioner(ModelSpec.from_config("clip", {"arch": "open_clip/CoG-demo-CLIP", "weights": "random"}))


def test_decoding_cuts_at_the_end_token():
    captioner = build_captioner(ModelSpec.from_config("coca", {"arch": "open_clip/CoG-demo-CoCa", "weights": "random"}))
    tokenizer = captioner.text_model.tokenizer
    tokens = tokenizer(["a dog on the grass"])  # start, words, end, padding
    assert decode(tokenizer, tokens) == ["a dog on the grass"]
    assert captioner.preprocessing.size == 32


def test_generation_settings_are_checked():
    with pytest.raises(ValueError, match="generation_type"):
        Generation(generation_type="nucleus")
    with pytest.raises(ValueError, match="multiple"):
        Generation(num_beams=4, num_beam_groups=3)


def tiny_coca(early_end: bool = False):
    """The tiny CoCa at random:3 weights. Random weights almost never choose the end token;
    ``early_end`` gives it the decoder's output column of the token greedy decoding writes
    most (x 1.001), so that captions end at several lengths."""
    captioner = build_captioner(ModelSpec.from_config("coca", {"arch": "open_clip/CoG-demo-CoCa", "weights": "random:3"}))
    network = captioner.network.eval()
    if early_end:
        tokens = generate(network, IMAGES, Generation("greedy", seq_len=12, min_seq_len=2))
        projection = network.text_decoder.text_projection.data
        projection[:, END_ID] = projection[:, tokens[:, 1:].flatten().bincount().argmax()] * 1.001
    return network


IMAGES = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def ended_at(tokens: torch.Tensor) -> list[int | None]:
    """Each row's end token position (None: no end token)."""
    return [row.tolist().index(END_ID) if END_ID in row else None for row in tokens]


def test_greedy_decoding_is_the_argmax_of_the_models_own_logits():
    network = tiny_coca()
    generation = Generation("greedy", seq_len=8, min_seq_len=3)
    tokens = generate(network, IMAGES, generation)
    assert tokens.shape == (5, 8) and (tokens[:, 0] == START_ID).all()
    # the whole sequence at once through open_clip's teacher-forced forward: the logits at
    # each position see only the tokens before it (the decoder is causal)
    with torch.no_grad():
        logits = network(IMAGES, tokens[:, :-1], output_labels=False)["logits"]
    logits[:, : generation.min_seq_len - 1, END_ID] = -float("inf")  # sequences shorter than min_seq_len
    assert torch.equal(tokens[:, 1:-1], logits[:, :-1].argmax(dim=2))
    # random weights never chose the end token: it is written at seq_len
    assert ended_at(tokens) == [7] * 5
    # a repetition penalty divides the positive logits of the tokens already written and
    # multiplies the negative ones
    penalised = generate(network, IMAGES, Generation("greedy", seq_len=8, min_seq_len=3, repetition_penalty=3.0))
    with torch.no_grad():
        logits = network(IMAGES, penalised[:, :-1], output_labels=False)["logits"]
    logits[:, : generation.min_seq_len - 1, END_ID] = -float("inf")
    for position in range(penalised.shape[1] - 2):
        step = logits[:, position].clone()
        for row, written in enumerate(penalised[:, : position + 1]):
            seen = step[row, written]
            step[row, written] = torch.where(seen < 0, seen * 3.0, seen / 3.0)
        assert torch.equal(penalised[:, position + 1], step.argmax(dim=1))
    assert not torch.equal(penalised, tokens)


def test_greedy_decoding_stops_at_the_end_token_and_respects_the_lengths():
    network = tiny_coca(early_end=True)
    tokens = generate(network, IMAGES, Generation("greedy", seq_len=12, min_seq_len=2))
    ends = ended_at(tokens)
    assert all(end is not None for end in ends) and min(ends) < 11 and tokens.shape[1] == max(ends) + 1
    assert all((row[end + 1:] == network.pad_id).all() and END_ID not in row[:end] for row, end in zip(tokens, ends))
    # the end token is allowed from min_seq_len tokens on, start included: never before
    later = generate(network, IMAGES, Generation("greedy", seq_len=12, min_seq_len=6))
    assert min(ended_at(later)) >= 6
    assert [end for end in ended_at(later) if end > 6] and min(ends) < 6  # the bound binds
    # seq_len caps every caption, the end token included
    short = generate(network, IMAGES, Generation("greedy", seq_len=4, min_seq_len=2))
    assert short.shape[1] <= 4 and all(end is not None and end <= 3 for end in ended_at(short))
    assert torch.equal(short[:, :3], tokens[:, :3])


def test_beam_search_of_one_beam_is_greedy():
    # one beam: a caption ends as soon as its most likely token is the end token, as greedy's;
    # at seq_len greedy writes the end token, beam search keeps the model's token
    network = tiny_coca(early_end=True)
    greedy = generate(network, IMAGES, Generation("greedy", seq_len=12, min_seq_len=2))
    beam = generate(network, IMAGES, Generation("beam_search", seq_len=12, min_seq_len=2, num_beams=1,
                                                num_beam_groups=1))
    assert beam.shape == greedy.shape
    assert torch.equal(beam[:, :-1], greedy[:, :-1])
    capped = greedy[:, -1] == END_ID
    assert torch.equal(beam[~capped, -1], greedy[~capped, -1])


def test_decoding_a_batch_equals_decoding_one_image_at_a_time():
    network = tiny_coca(early_end=True)
    for generation in (Generation("greedy", seq_len=12, min_seq_len=2), Generation(seq_len=12, min_seq_len=2),
                       Generation("top_k", seq_len=12, min_seq_len=2, top_k=1)):
        batched = generate(network, IMAGES, generation)
        for image in range(len(IMAGES)):
            alone = generate(network, IMAGES[image:image + 1], generation)[0]
            assert torch.equal(batched[image, :len(alone)], alone)
            assert (batched[image, len(alone):] == network.pad_id).all()
    beams = generate(network, IMAGES, Generation(seq_len=12, min_seq_len=2))
    ends = ended_at(beams)
    assert all(end is None or end >= 2 for end in ends) and any(end is not None for end in ends)


def test_beam_search_groups_repeat_one_search():
    network = tiny_coca(early_end=True)
    grouped = generate(network, IMAGES, Generation(seq_len=10, min_seq_len=2, num_beams=6, num_beam_groups=3))
    assert torch.equal(grouped, generate(network, IMAGES, Generation(seq_len=10, min_seq_len=2, num_beams=2,
                                                                     num_beam_groups=1)))


def test_sampling_is_seeded_and_its_narrowest_settings_are_greedy():
    network = tiny_coca()
    greedy = generate(network, IMAGES, Generation("greedy", seq_len=8, min_seq_len=2))
    assert torch.equal(generate(network, IMAGES, Generation("top_k", seq_len=8, min_seq_len=2, top_k=1)), greedy)
    assert torch.equal(generate(network, IMAGES, Generation("top_p", seq_len=8, min_seq_len=2, top_p=1e-9)), greedy)
    wide = Generation("top_k", seq_len=8, min_seq_len=2, top_k=1000, temperature=2.0, seed=5)
    first = generate(network, IMAGES, wide)
    assert torch.equal(first, generate(network, IMAGES, wide))
    assert not torch.equal(first, greedy)
    nucleus = Generation("top_p", seq_len=8, min_seq_len=2, top_p=0.9, seed=5)
    assert torch.equal(generate(network, IMAGES, nucleus), generate(network, IMAGES, nucleus))


def test_captions_no_longer_than_the_models_context():
    with pytest.raises(ValueError, match="longer than the model's context"):
        generate(tiny_coca(), IMAGES, Generation("greedy", seq_len=100))


def test_caption_images_then_descriptions(tmp_path):
    table = make_world(tmp_path, concepts=3, train=1, test=3, corrupt=("n00000001/n00000001_3.JPEG",))
    captions = tmp_path / "out" / "captions.tsv"
    common = [*TINY, "--split-table", str(table), "--image-root", str(tmp_path / "images"), "--dataset", "l1"]
    assert caption_images_command([*common, *FAST, "--per-group", "2", "--batch-size", "4",
                                   "--device", "cpu", "--output", str(captions)]) == 0
    rows = read_tsv(captions)
    assert captions.read_text().splitlines()[0] == "path\tgroup\tcaption"
    # the first two test images of each concept; the corrupt one (the third of n00000001) is not among them
    assert [(row["path"], row["group"]) for row in rows] == [
        (f"n{c:08d}/n{c:08d}_{n}.JPEG", f"n{c:08d}") for c in range(3) for n in (1, 2)]
    assert all(row["caption"] and "<" not in row["caption"] for row in rows)
    # the same weights caption the same images alike: computed once, reproducible
    again = tmp_path / "again.tsv"
    assert caption_images_command([*common, *FAST, "--per-group", "2", "--device", "cpu", "--output", str(again)]) == 0
    assert again.read_text() == captions.read_text()

    descriptions = tmp_path / "out" / "descriptions.tsv"
    assert auto_descriptions_command([*TINY, "--captions", str(captions), "--device", "cpu",
                                      "--output", str(descriptions)]) == 0
    written = read_tsv(descriptions)
    assert list(written[0]) == ["group", "description", "score", "captions"]
    assert [row["group"] for row in written] == [f"n{c:08d}" for c in range(3)]
    assert all(row["captions"] == "2" and float(row["score"]) > -1 for row in written)
    # every group is described by one of its own captions
    assert all(row["description"] in {r["caption"] for r in rows if r["group"] == row["group"]} for row in written)

    # grouped by k-means clusters: the same captions, the clusters' names
    assignments = tmp_path / "assignments.tsv"
    assignments.write_text("path\tlabel\tcluster\n" + "".join(
        f"{row['path']}\t0\t{i % 2}\n" for i, row in enumerate(rows)))
    clustered = tmp_path / "clusters.tsv"
    assert auto_descriptions_command([*TINY, "--captions", str(captions), "--assignments", str(assignments),
                                      "--device", "cpu", "--output", str(clustered)]) == 0
    assert [(row["group"], row["captions"]) for row in read_tsv(clustered)] == [("cluster-0", "3"), ("cluster-1", "3")]


def test_a_corrupt_image_fails_the_job_by_default_and_is_left_out_when_allowed(tmp_path, monkeypatch, caplog):
    table = make_world(tmp_path, concepts=2, train=1, test=2, corrupt=("n00000000/n00000000_1.JPEG",))
    output = tmp_path / "captions.tsv"
    command = [*TINY, *FAST, "--split-table", str(table), "--image-root", str(tmp_path / "images"),
               "--dataset", "l1", "--device", "cpu", "--output", str(output)]
    assert caption_images_command(command) == 1
    assert "1 of the 4 images of l1's test split failed to decode" in caplog.text and not output.exists()
    monkeypatch.setenv(LIMIT_VARIABLE, "0.25")
    assert caption_images_command([*TINY, *FAST, "--split-table", str(table), "--image-root", str(tmp_path / "images"),
                                   "--dataset", "l1", "--device", "cpu", "--output", str(output)]) == 0
    assert [row["path"] for row in read_tsv(output)] == [
        "n00000000/n00000000_2.JPEG", "n00000001/n00000001_1.JPEG", "n00000001/n00000001_2.JPEG"]


def test_bad_inputs_fail_clearly_and_write_nothing(tmp_path, caplog):
    output = tmp_path / "descriptions.tsv"
    wrong = tmp_path / "wrong.tsv"
    wrong.write_text("path\twnid\nx.JPEG\tn1\n")
    assert auto_descriptions_command([*TINY, "--captions", str(wrong), "--output", str(output)]) == 1
    assert f"{wrong}: expected a captions TSV" in caplog.text and "re-run caption-images" in caplog.text
    captions = tmp_path / "captions.tsv"
    captions.write_text("path\tgroup\tcaption\na.JPEG\tn1\ta dog\nb.JPEG\tn2\ta cat\n")
    assignments = tmp_path / "assignments.tsv"
    assignments.write_text("path\tlabel\tcluster\na.JPEG\t0\t1\n")
    assert auto_descriptions_command([*TINY, "--captions", str(captions), "--assignments", str(assignments),
                                      "--output", str(output)]) == 1
    assert "1 captioned images have no cluster (first: b.JPEG)" in caplog.text
    assert not output.exists() and not list(tmp_path.glob(".descriptions*"))


def test_text_tower_embeddings_are_normalised():
    from imagenet_cog.models.open_clip_text import build_text_model, text_embeddings

    model = build_text_model(ModelSpec.from_config("coca", {"arch": "open_clip/CoG-demo-CoCa", "weights": "random:3"}))
    embeddings = text_embeddings(model, ["a dog", "a cat", "a dog"], torch.device("cpu"), batch=2)
    torch.testing.assert_close(embeddings.norm(dim=1), torch.ones(3))
    torch.testing.assert_close(embeddings[0], embeddings[2])
