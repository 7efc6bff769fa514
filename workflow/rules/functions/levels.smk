# Levels stage: what the rules of levels.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import os
import shlex
import sys
from types import SimpleNamespace

from imagenet_cog.core.image_layouts import FOLDERS
from imagenet_cog.core.image_roots import ImageRootError, resolve_layout, resolve_release
from imagenet_cog.levels.cut import LevelError
from imagenet_cog.levels.level_sets import check_level_sets


def concept_list_inputs(wildcards):
    """The concept list, name and gloss files: config ``concepts.*`` or the files timm ships,
    resolved here so that a changed list re-runs the levels."""
    from imagenet_cog.levels.concepts import TIMM_FILES, ConceptError, concept_file

    try:
        return {key: str(concept_file(key, config["concepts"][key])) for key in TIMM_FILES}
    except ConceptError as error:
        raise WorkflowError(f"config.yaml: {error}")


def in21k_release():
    """data.in21k_release, auto resolved: the release a Hub copy says it is, else winter21."""
    root = config["data"]["in21k_root"] if config["mode"] == "imagenet" else None
    try:
        return resolve_release(config["data"]["in21k_release"], root, config["data"]["in21k_layout"])
    except ImageRootError as error:
        raise WorkflowError(f"config: {error}") from None


IN21K_RELEASE = in21k_release()


def counts_images_from_root():
    """Whether the image_counts rule counts the copy's synset folders (data.count_images_from_root)."""
    counting = config["data"]["count_images_from_root"]
    if counting is True and IN21K_RELEASE == "winter21":
        # Counting a Winter 2021 copy would silently change the eligible concepts and so the
        # levels; the pre-flight check names what the copy lacks instead.
        print(
            "note: data.count_images_from_root is true, but data.in21k_release is winter21: the shipped Fall 2011 "
            "counts are used, so the levels are the paper's (set it to insist to count your copy).",
            file=sys.stderr,
        )
        return False
    if not counting:
        return False
    if not config["data"]["in21k_root"]:
        raise WorkflowError(
            "config.yaml: data.count_images_from_root is set but data.in21k_root is not; "
            "point it at ImageNet-21K or set count_images_from_root: false."
        )
    try:
        layout = resolve_layout(naming.IN21K, config["data"]["in21k_root"], config["data"]["in21k_layout"])
    except ImageRootError as error:
        raise WorkflowError(f"config: {error}") from None
    if layout != FOLDERS:
        raise WorkflowError(
            f"config.yaml: data.count_images_from_root counts synset folders, but data.in21k_root is in the {layout} "
            "layout; set count_images_from_root: false (the shipped counts) or point in21k_root at extracted folders."
        )
    return True


COUNT_IMAGES_FROM_ROOT = counts_images_from_root()


def image_count_inputs(wildcards):
    """The counts TSV, unless the images are counted under data.in21k_root (a param: Snakemake
    would stat millions of files)."""
    return {} if COUNT_IMAGES_FROM_ROOT else {"counts": config["concepts"]["image_counts"]}


def published_levels_inputs(wildcards):
    if config["levels"]["source"] != "published":
        return {}
    if not config["levels"]["published_levels"]:
        raise WorkflowError(
            "config.yaml: levels.source is 'published' but levels.published_levels is not set; "
            "point it at the authors' level pickle or set levels.source: wordnet."
        )
    return {"published": config["levels"]["published_levels"]}


# Level sets (imagenet_cog/levels/level_sets.py): datasets "<set>-l<k>" and "random-<NN>"
# are views over the features of Lin's levels and of "pool" (eligible concepts outside
# Lin's levels, extracted only when a configured set may need them).
LEVEL_SET_SETTINGS = config["level_sets"]
try:
    check_level_sets(LEVEL_SET_SETTINGS["sets"])
except LevelError as error:
    raise WorkflowError(f"config.yaml: {error}")
RANKED_LEVEL_SETS = [name for name in LEVEL_SET_SETTINGS["sets"] if name != naming.RANDOM]
RANDOM_DRAWS = (
    [naming.draw_id(draw) for draw in range(1, LEVEL_SET_SETTINGS["random"]["draws"] + 1)]
    if naming.RANDOM in LEVEL_SET_SETTINGS["sets"]
    else []
)
LEVEL_SET_DATASETS = [naming.level_set_dataset(name, level) for name in RANKED_LEVEL_SETS for level in LEVEL_NAMES] + [
    naming.random_dataset(draw) for draw in RANDOM_DRAWS
]
LEVEL_SET_SHOTS = [str(shots) for shots in LEVEL_SET_SETTINGS["shots"]]
LEVEL_SET_SEEDS = [str(seed) for seed in (LEVEL_SET_SETTINGS["seeds"] or config["probes"]["seeds"])]
# the models viewed and probed on the level sets (and whose pool is extracted); a stage that
# does not run picks none, so a config that removes a model its list names still runs
LEVEL_SET_MODELS = stage_models("level_sets") if LEVEL_SET_DATASETS else []


def word_vectors_file():
    """level_sets.word2vec.embeddings, or in demo mode without one, the generated file."""
    path = LEVEL_SET_SETTINGS["word2vec"]["embeddings"]
    if path is None and config["mode"] == "demo":
        return PATHS.word_vectors_demo()
    if path is None:
        raise WorkflowError(
            "config.yaml: level_sets.sets has word2vec but level_sets.word2vec.embeddings is not set; "
            "point it at a word2vec-format file (e.g. Wikipedia2Vec's word2vec export)."
        )
    if not os.path.isfile(path):
        raise WorkflowError(f"config.yaml: level_sets.word2vec.embeddings = {path!r} does not exist; fix the path.")
    with open(path, "rb") as stream:
        header = stream.readline(200).split()
    if len(header) != 2 or not all(field.isdigit() for field in header):
        raise WorkflowError(
            f"config.yaml: level_sets.word2vec.embeddings = {path!r} is not in word2vec format (its first "
            f"line must be '<count> <dimension>'); export the vectors in word2vec format."
        )
    return path


if "word2vec" in LEVEL_SET_SETTINGS["sets"]:
    note_lack("word vectors", "level_sets.word2vec.embeddings", word_vectors_file)


def check_published_pickle(key):
    """The authors' pickle at levels.<key>, when the config reads one."""
    path = config["levels"][key]
    if path and not os.path.isfile(path):
        raise WorkflowError(
            f"config: levels.{key} = {path!r} does not exist; download the authors' pickle (docs/imagenet.md, "
            f"'The authors' levels and splits') or fix the path."
        )


note_lack("published pickles", "levels.published_levels", published_levels_inputs, None)
for published_key in ("published_levels", "published_splits"):
    note_lack("published pickles", f"levels.{published_key}", check_published_pickle, published_key)


def check_random_draw_size():
    """A draw larger than the eligible pool fails before any job once the ranking exists
    (before that, the draw's own job fails with the same message)."""
    if not RANDOM_DRAWS or not os.path.exists(PATHS.ranking()):
        return
    with open(PATHS.ranking()) as stream:
        eligible = sum(1 for _ in stream) - 1
    if LEVEL_SET_SETTINGS["random"]["concepts"] > eligible:
        raise WorkflowError(
            f"config.yaml: level_sets.random.concepts is {LEVEL_SET_SETTINGS['random']['concepts']} but only "
            f"{eligible} concepts are eligible ({PATHS.ranking()}); lower it."
        )


check_random_draw_size()


def level_set_inputs(wildcards):
    inputs = {
        "wordnet": PATHS.wordnet_corpus(),
        "catalogue": PATHS.concept_catalogue(),
        "lin_ranking": PATHS.ranking(),
        "lin_levels": [PATHS.level_concepts(level) for level in LEVEL_NAMES],
    }
    if wildcards.level_set == "word2vec":
        inputs["embeddings"] = word_vectors_file()
    return inputs


def level_set_files():
    """The rankings, summaries, overlaps and figures of the configured level sets (nothing
    when level_sets.sets is empty)."""
    return [
        *(
            path
            for name in RANKED_LEVEL_SETS
            for path in (
                PATHS.level_set_ranking(name),
                PATHS.level_set_summary(name),
                PATHS.level_set_overlap(name),
                PATHS.level_set_figure(name, "png"),
                PATHS.level_set_figure(name, "pdf"),
            )
        ),
        *(PATHS.random_draw_overlap(draw) for draw in RANDOM_DRAWS),
    ]


def levels_targets():
    """What a full run makes of this stage (rule all gathers each stage's list); the rest
    are inputs of later stages."""
    return [PATHS.levels_figure("png"), *level_set_files()]
