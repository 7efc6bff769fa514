# Analyses stage: what the rules of analyses.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import shlex

from imagenet_cog.core.layout import (
    CONCEPT_CURVE,
    CONCEPT_OUTLIERS,
    CONCEPT_TABLE,
    TABLE_FORMATS,
    analysis_figure_names,
    analysis_table_names,
)

ANALYSES_CONFIG = config["analyses"]
# Per (model, dataset) analyses switched on, in the order of imagenet_cog.core.layout.ANALYSES.
ENABLED_ANALYSES = [
    analysis for analysis in ("kmeans", "alignment_uniformity", "learnability") if ANALYSES_CONFIG[analysis]["enabled"]
]
# the models of the per-(model, dataset) analyses, their summary, tables, figures and agreement
# (none when no analysis runs)
ANALYSES_MODELS = stage_models("analyses") if ENABLED_ANALYSES else []
if ANALYSES_CONFIG["agreement"]["enabled"] and not ANALYSES_CONFIG["kmeans"]["enabled"]:
    raise WorkflowError(
        "config.yaml: analyses.agreement.enabled compares the models' k-means clusterings, but "
        "analyses.kmeans.enabled is false; switch k-means on or agreement off."
    )


def agreement_enabled():
    return ANALYSES_CONFIG["agreement"]["enabled"] and ANALYSES_CONFIG["kmeans"]["enabled"]


def analyses_switched_on():
    """Names of the analyses, tables and figures to make (agreement included)."""
    return [*ENABLED_ANALYSES, *(["agreement"] if agreement_enabled() else [])]


def test_images_per_concept(dataset):
    """Test images each concept of ``dataset`` has: the demo's or the level split's size;
    IN-1K's official validation set has 50 per class."""
    if config["mode"] == "demo":
        return config["demo"]["test_images_per_concept"]
    return 50 if dataset == naming.IN1K else config["splits"]["test_per_concept"]


if ANALYSES_CONFIG["learnability"]["enabled"]:
    for dataset in DATASETS:
        references = ANALYSES_CONFIG["learnability"]["references"]
        if references + 1 > test_images_per_concept(dataset):
            raise WorkflowError(
                f"config.yaml: analyses.learnability.references is {references}, but each task needs "
                f"M + 1 = {references + 1} test images of a concept and {dataset} has "
                f"{test_images_per_concept(dataset)} per concept; lower analyses.learnability.references "
                f"to at most {test_images_per_concept(dataset) - 1}."
            )


def analysis_results():
    """Every per-(model, dataset) analysis JSON the summary collects."""
    return [
        PATHS.analysis_result(model, dataset, analysis)
        for model in ANALYSES_MODELS
        for dataset in DATASETS
        for analysis in ENABLED_ANALYSES
    ]


def agreement_matrices():
    return {dataset: PATHS.agreement_matrix(dataset) for dataset in DATASETS} if agreement_enabled() else {}


def analysis_side_outputs():
    """The TSVs written beside the analysis JSONs."""
    return [
        path
        for model in ANALYSES_MODELS
        for dataset in DATASETS
        for path in (
            *([PATHS.kmeans_assignments(model, dataset)] if "kmeans" in ENABLED_ANALYSES else []),
            *([PATHS.learnability_concepts(model, dataset)] if "learnability" in ENABLED_ANALYSES else []),
        )
    ]


def analysis_outputs():
    """Every file of the analyses stage; none when every analysis is switched off. The
    per-(model, dataset) results are listed too: Snakemake re-creates a lost file only when
    a target asks for it, and the summary made from it would otherwise stay as it is."""
    if not analyses_switched_on():
        return []
    return [
        *analysis_results(),
        *analysis_side_outputs(),
        PATHS.analyses_summary(),
        *agreement_matrices().values(),
        *PATHS.analysis_tables(analyses_switched_on(), DATASETS),
        *PATHS.analysis_figures(analyses_switched_on()),
    ]


def analyses_rendering_arguments(figures=False):
    """The analyses tables' (each model's exposure class beside it) or, with ``figures``, figures'
    (the models pretrained beyond IN-1K set apart, where one is: figure_exposures) arguments."""
    agreement = " ".join(f"{dataset}={path}" for dataset, path in agreement_matrices().items())
    exposures = figure_exposures(ANALYSES_MODELS) if figures else f" --exposures {exposures_option(ANALYSES_MODELS)}"
    return (
        f"--results-root {PATHS.root} --models {shlex.quote(models_json(models=ANALYSES_MODELS))} "
        f"--datasets {' '.join(DATASETS)} --analyses {' '.join(analyses_switched_on())}"
        + (f" --agreement {agreement}" if agreement else "")
        + exposures
    )


def analysis_table_report(name):
    """An analyses table's CSV as a report entry (Markdown and LaTeX beside it)."""
    caption = "analyses_agreement.rst" if name.startswith("analyses_agreement_") else f"{name}.rst"
    dataset = (
        name.rsplit("_", 1)[1].upper().replace("IN1K", "IN-1K") if name.startswith("analyses_agreement_") else "IN-1K and levels"
    )
    return report_output(
        PATHS.table(name, "csv"),
        caption=caption,
        category="Analyses",
        subcategory="Tables",
        labels={"table": name.removeprefix("analyses_"), "dataset": dataset},
    )


def analysis_figure_report(name):
    return report_output(
        PATHS.figure(name, "png"),
        caption=f"{name}.rst",
        category="Analyses",
        subcategory="Figures",
        labels={"figure": name.removeprefix("analyses_")},
    )


# human forced-choice sheets (Laina et al. 2020, Sec. 3) ---------------------------------


def rater_model():
    """The model whose test features give the sheets' hard negatives."""
    model = config["analyses"]["raters"]["model"] or config["results"]["baseline_model"]
    if model not in config["models"]:
        raise WorkflowError(
            f"config.yaml: analyses.raters.model '{model}' is not a key of 'models' "
            f"({', '.join(MODELS)}); set it to one of them (null: results.baseline_model)."
        )
    return model


if "hard" in config["analyses"]["raters"]["negatives"]:
    rater_model()


def rater_sheet_inputs(wildcards):
    """Split table and catalogue; the test features only for hard negatives; the automatic
    descriptions when the pages show them; in demo mode the generated images (real ImageNet
    folders stay a param: Snakemake would stat every file)."""
    dataset = wildcards.dataset
    inputs = {"split_table": PATHS.image_splits(dataset), "catalogue": PATHS.concept_catalogue()}
    if "hard" in config["analyses"]["raters"]["negatives"]:
        inputs["features"] = PATHS.features(rater_model(), dataset, "test")
    if config["analyses"]["raters"]["description"] != "gloss":
        inputs["descriptions"] = auto_descriptions(dataset)
    if config["mode"] == "demo":
        inputs["images"] = image_root(dataset)
    return {**inputs, **image_index(dataset)}


def rater_sheet_settings():
    """The settings that shape the sheets (params: a change re-runs them); not 'enabled',
    which only says whether rule all asks for them, nor 'model', whose features are an input."""
    raters = config["analyses"]["raters"]
    settings = {key: raters[key] for key in ("concepts_per_dataset", "tasks_per_concept", "references", "image_size", "seed")}
    # the pages' description only when not the gloss: finished sheets of the default keep their params
    return settings | ({"description": raters["description"]} if raters["description"] != "gloss" else {})


def rater_sheet_description_options(wildcards, input):
    """--description and --descriptions when the pages show the automatic description."""
    if "descriptions" not in input.keys():
        return ""
    return f"--description {config['analyses']['raters']['description']} --descriptions {input.descriptions}"


def rater_sheet_outputs(datasets=None):
    return [path for dataset in (datasets or DATASETS) for path in (PATHS.rater_sheets(dataset), PATHS.rater_key(dataset))]


def rater_sheet_targets():
    """The sheets of every dataset, for rule all, when analyses.raters.enabled."""
    return rater_sheet_outputs() if config["analyses"]["raters"]["enabled"] else []


def analyses_targets():
    """What a full run makes of this stage (rule all gathers each stage's list), the
    switched-on analyses and, when analyses.raters.enabled, the rater sheets."""
    return [
        *rater_sheet_targets(),
        *analysis_outputs(),
        *caption_targets(),
        *model_describability_outputs(),
        *detection_outputs(),
        *concept_outputs(),
        *(PATHS.concept_accuracy(model) for model in series_concept_models() if model not in concept_models()),
    ]


# class-level captioning (Laina et al. 2020, Sec. 4) ------------------------------------

CAPTIONS = ANALYSES_CONFIG["captions"]
CAPTIONER = CAPTIONS["captioner"]["name"]


def captioner_spec():
    """The registry spec of the captioner (analyses.captions.captioner)."""
    from imagenet_cog.models.registry import ModelSpec

    entry = {key: value for key, value in CAPTIONS["captioner"].items() if key != "name"}
    try:
        return ModelSpec.from_config(CAPTIONER, entry, config["checkpoints_dir"], check_checkpoint=False)
    except (ValueError, FileNotFoundError) as error:
        raise WorkflowError(f"config.yaml: analyses.captions.captioner: {error}")


def caption_datasets():
    """The datasets captioned: analyses.captions.datasets, else every configured one."""
    selected = CAPTIONS["datasets"] or DATASETS
    unknown = [dataset for dataset in selected if dataset not in DATASETS]
    if unknown:
        raise WorkflowError(
            f"config.yaml: analyses.captions.datasets names {', '.join(unknown)}, which 'datasets' does not "
            f"list ({', '.join(DATASETS)}); fix the list or set it to null (every dataset)."
        )
    return list(selected)


def caption_clusters():
    """Whether the k-means clusters are described too: when analyses.captions.clusters asks
    and analyses.kmeans makes the clusterings (a run without k-means describes concepts only)."""
    return CAPTIONS["clusters"] and ANALYSES_CONFIG["kmeans"]["enabled"]


# the models whose k-means clusters are described: analyses.captions.models, null meaning the
# analyses' models (whose k-means makes the clusters)
CAPTION_CLUSTER_MODELS = (
    (ANALYSES_MODELS if CAPTIONS["models"] is None else stage_models("analyses.captions")) if caption_clusters() else []
)
if CAPTIONS["enabled"]:
    captioner_spec()
    caption_datasets()


@functools.cache
def captioner_options():
    """The captioner's name, arch, weights (and trusted globals) and the weights identity
    planned with: new weights caption again. Asked for by the caption jobs alone (their params
    are functions): a pretrained captioner resolves through open_clip and torch, seconds of
    imports that every read of the Snakefile would pay otherwise, captions off or on."""
    from imagenet_cog.models.registry import weights_identity

    spec = captioner_spec()
    options = ["--model-name", CAPTIONER, "--arch", spec.arch, "--weights", spec.weights]
    if spec.trusted_globals:
        options += ["--trusted-globals", *spec.trusted_globals]
    return shlex.join([*options, "--weights-identity", weights_identity(spec)])


def generation_options():
    """open_clip's generation settings as caption-images options."""
    return " ".join(f"--{key.replace('_', '-')} {value}" for key, value in sorted(CAPTIONS["generation"].items()))


def caption_inputs(wildcards):
    """The split table; in demo mode the generated images (real roots stay a param)."""
    dataset = wildcards.dataset
    inputs = {"split_table": PATHS.image_splits(dataset)}
    if config["mode"] == "demo":
        inputs["images"] = image_root(dataset)
    return {**inputs, **image_index(dataset)}


def auto_description_report(path, grouping):
    return report_output(
        path,
        caption="auto_descriptions.rst",
        category="Analyses",
        subcategory="Auto descriptions",
        labels={"descriptions": grouping, "dataset": "{dataset}", "captioner": "{captioner}"},
    )


def caption_outputs():
    """The captions and descriptions of every captioned dataset (and cluster)."""
    return [
        path
        for dataset in caption_datasets()
        for path in (
            PATHS.captions(CAPTIONER, dataset),
            PATHS.auto_descriptions(CAPTIONER, dataset),
            *[PATHS.auto_descriptions(CAPTIONER, dataset, model) for model in CAPTION_CLUSTER_MODELS],
        )
    ]


def caption_targets():
    """What a full run makes of class-level captioning, when analyses.captions.enabled."""
    return caption_outputs() if CAPTIONS["enabled"] else []


# describability answered by an image-text model (Laina et al. 2020, Eq. 3, Tab. 2) -------
DESCRIBABILITY_CONFIG = ANALYSES_CONFIG["model_describability"]


def auto_descriptions(dataset):
    """The captioner's automatic descriptions of ``dataset`` (Eq. 4's, a group/description/
    score/captions TSV), or None where analyses.captions does not caption it."""
    if not CAPTIONS["enabled"] or dataset not in caption_datasets():
        return None
    return PATHS.auto_descriptions(CAPTIONER, dataset)


if config["analyses"]["raters"]["description"] != "gloss":
    for dataset in DATASETS:
        if auto_descriptions(dataset) is None:
            raise WorkflowError(
                f"config.yaml: analyses.raters.description is '{config['analyses']['raters']['description']}', "
                f"but {dataset} has no automatic descriptions: enable analyses.captions and caption every dataset "
                f"(analyses.captions.datasets: null), or set it to gloss."
            )


def describability_models():
    """The models that answer: those with a text tower in their image features' space, among
    the results' models."""
    return stage_models("analyses.model_describability", needs_text_tower=True)


def model_describability_enabled():
    return (
        DESCRIBABILITY_CONFIG["enabled"]
        and "describability" in config["analyses"]["raters"]["variants"]
        and bool(describability_models())
    )


def describability_model_pattern():
    """The model wildcard's constraint: the answering models' names (none: matches nothing)."""
    return "|".join(re.escape(model) for model in describability_models()) or "(?!)"


def model_describability_inputs(wildcards):
    """The dataset's rater key, the catalogue (glosses), the model's test features, and the
    automatic descriptions when connected (auto_descriptions)."""
    inputs = {
        "key": PATHS.rater_key(wildcards.dataset),
        "catalogue": PATHS.concept_catalogue(),
        "test": PATHS.features(wildcards.model, wildcards.dataset, "test"),
    }
    descriptions = auto_descriptions(wildcards.dataset)
    return inputs | ({"descriptions": descriptions} if descriptions else {})


def describability_model_options(model):
    """The text tower's model: arch, weights (as extraction reads them), image features, trusted objects."""
    from imagenet_cog.models.registry import extract_options

    spec = model_spec(model)
    return shlex.join(["--arch", spec.arch, "--weights", command_weights(model), *extract_options(spec)])


def describability_results():
    return [
        PATHS.analysis_result(model, dataset, "model_describability") for model in describability_models() for dataset in DATASETS
    ]


def human_score_files():
    """source -> score-raters TSV, for the sources whose answers are configured."""
    return {source: path for source, path in DESCRIBABILITY_CONFIG["human_scores"].items() if path}


def describability_table_inputs(wildcards):
    return {"results": describability_results(), **{f"human_{source}": path for source, path in human_score_files().items()}}


def describability_table_arguments(wildcards, input):
    humans = " ".join(f"--human-{source} {shlex.quote(getattr(input, f'human_{source}'))}" for source in human_score_files())
    return f"--results-root {PATHS.root} --models {shlex.quote(models_json())} --datasets {' '.join(DATASETS)}" + (
        f" {humans}" if humans else ""
    )


def model_describability_outputs():
    """The answers and results of every answering model and dataset, and the table; none
    when no model answers (or the sheets have no describability tasks)."""
    if not model_describability_enabled():
        return []
    return [
        *describability_results(),
        *(PATHS.model_describability_answers(model, dataset) for model in describability_models() for dataset in DATASETS),
        *(PATHS.table("analyses_describability", extension) for extension in TABLE_FORMATS),
    ]


# detecting unseen concepts (docs/analyses.md) ---------------------------------------------
DETECTION_CONFIG = ANALYSES_CONFIG["detection"]
DETECTION_FIGURES = ("detection", "detection_vs_recognition")
DETECTION_PROBE_SCORES = [score for score in DETECTION_CONFIG["scores"] if score in ("msp", "max_logit", "energy")]


def detection_levels():
    """The datasets scored as unseen: every configured dataset but IN-1K."""
    return [dataset for dataset in DATASETS if dataset != naming.IN1K]


def detection_models():
    """analyses.detection.models (null: the result models); none while it is switched off or
    the run has IN-1K or no level, which detection compares."""
    if not DETECTION_CONFIG["enabled"] or naming.IN1K not in DATASETS or not detection_levels():
        return []
    return stage_models("analyses.detection")


if detection_models() and DETECTION_PROBE_SCORES and "all" not in SHOTS:
    raise WorkflowError(
        f"config.yaml: analyses.detection.scores has {', '.join(DETECTION_PROBE_SCORES)}, which read the IN-1K probe at "
        "N = all, but probes.shots has no 'all'; add it, or keep only knn_distance and mcm in the scores."
    )


def detection_reads_text(model):
    """Whether the model's MCM is scored: mcm asked for and a text tower in its features' space."""
    from imagenet_cog.models.registry import has_text_tower

    return "mcm" in DETECTION_CONFIG["scores"] and has_text_tower(config["models"][model])


def detection_inputs(wildcards):
    """IN-1K's train and test features, each level's test features, the IN-1K N = all probe's
    result JSON of every seed (its classifier file beside it is read, not an output: as the
    label-noise audit does) and, for MCM, the zero-shot classifier of IN-1K's names."""
    model = wildcards.model
    inputs = {
        "train": PATHS.features(model, naming.IN1K, "train"),
        "known": PATHS.features(model, naming.IN1K, "test"),
        "unknown": [PATHS.features(model, dataset, "test") for dataset in detection_levels()],
        "results": [PATHS.probe_result(model, naming.IN1K, "all", seed) for seed in SEEDS] if DETECTION_PROBE_SCORES else [],
    }
    if detection_reads_text(model):
        inputs["text"] = PATHS.zeroshot_classifier(model, naming.IN1K)
    return inputs


def detection_options(wildcards, input):
    """The probe seeds beside their result JSONs, and the text classifier when MCM is scored."""
    options = f"--seeds {' '.join(SEEDS)} --results {' '.join(input.results)}" if DETECTION_PROBE_SCORES else ""
    return options + (f" --text-classifier {input.text}" if "text" in input.keys() else "")


def detection_model_pattern():
    return "|".join(re.escape(model) for model in detection_models()) or "(?!)"


def detection_scores():
    """The scores tabled: the configured ones, mcm only when a scored model has a text tower."""
    return [
        score
        for score in DETECTION_CONFIG["scores"]
        if score != "mcm" or any(detection_reads_text(model) for model in detection_models())
    ]


def detection_table_report(score):
    return report_output(
        PATHS.table(f"detection_{score}", "csv"),
        caption="detection_table.rst",
        category="Analyses",
        subcategory="Detection",
        labels={"table": f"detection ({score})", "dataset": "levels against IN-1K"},
    )


def detection_figure_report(name):
    return report_output(
        PATHS.figure(name, "png"),
        caption=f"{name}.rst",
        category="Analyses",
        subcategory="Detection",
        labels={"figure": name},
    )


def detection_outputs():
    """Every file of unseen-concept detection; none when it is switched off."""
    models = detection_models()
    if not models:
        return []
    return [
        *(PATHS.detection_result(model) for model in models),
        *(PATHS.detection_seeds(model) for model in models),
        *(PATHS.table(f"detection_{score}", extension) for score in detection_scores() for extension in TABLE_FORMATS),
        *(PATHS.figure(name, extension) for name in DETECTION_FIGURES for extension in ("png", "pdf")),
    ]


# concept generalization as a curve (docs/analyses.md) -------------------------------------
CONCEPTS_CONFIG = ANALYSES_CONFIG["concepts"]


def concept_levels():
    """Lin's levels among the configured datasets: the curve's concepts."""
    return [dataset for dataset in DATASETS if naming.is_level(dataset)]


def concept_models():
    """analyses.concepts.models (null: the result models); none while it is switched off or the
    run has no level."""
    if not CONCEPTS_CONFIG["enabled"] or not concept_levels():
        return []
    return stage_models("analyses.concepts")


if concept_models() and "all" not in SHOTS:
    raise WorkflowError(
        "config.yaml: analyses.concepts reads the N = all probes' classifiers, but probes.shots has no 'all'; "
        "add it, or set analyses.concepts.enabled to false."
    )


def series_concept_models():
    """The series checkpoints whose per-concept accuracy is scored (series.concepts: the curve's
    slope per step); the concept results table takes the result models only."""
    if not concept_levels():
        return []
    return [model for model, series in SERIES_CHECKPOINTS.items() if series.protocol.concepts]


for series in SERIES.values():
    if series.protocol.concepts and concept_levels() and "all" not in series.protocol.shots:
        raise WorkflowError(
            f"config.yaml: series {series.name}'s per-concept accuracy (series.concepts) reads the N = all probes' "
            "classifiers, but series.shots has no 'all'; add it, or set series.concepts to false."
        )


def concept_datasets(model):
    """dataset -> probe seeds scored for ``model``: Lin's levels, and the level-set datasets
    when the model is probed on them at N = all; a series checkpoint's levels on its seeds."""
    if model in SERIES_REDUCED:
        return {dataset: SERIES_REDUCED[model].protocol.probe_seeds(SEEDS) for dataset in concept_levels()}
    datasets = {dataset: SEEDS for dataset in concept_levels()}
    if model in LEVEL_SET_MODELS and "all" in LEVEL_SET_SHOTS:
        datasets |= {dataset: LEVEL_SET_SEEDS for dataset in LEVEL_SET_DATASETS}
    return datasets


def concept_inputs(wildcards):
    """Each dataset's test features, and its N = all result JSONs with the training features a
    missing classifier is refitted from (the classifier files are read beside the JSONs, not
    outputs: as the label-noise audit reads them)."""
    datasets = concept_datasets(wildcards.model)
    model = wildcards.model
    return {
        "results": [PATHS.probe_result(model, dataset, "all", seed) for dataset, seeds in datasets.items() for seed in seeds],
        "train": [PATHS.features(model, dataset, "train") for dataset in datasets],
        "test": [PATHS.features(model, dataset, "test") for dataset in datasets],
    }


def concept_dataset_options(wildcards):
    return " ".join(f"--dataset {dataset} {' '.join(seeds)}" for dataset, seeds in concept_datasets(wildcards.model).items())


def concept_model_pattern():
    return "|".join(re.escape(model) for model in {*concept_models(), *series_concept_models()}) or "(?!)"


def concept_level_sets():
    """The ranked level sets some scored model is probed on: their rankings give the set's measure."""
    if not any(model in LEVEL_SET_MODELS for model in concept_models()) or "all" not in LEVEL_SET_SHOTS:
        return []
    return RANKED_LEVEL_SETS


def concept_results_inputs(wildcards):
    models = concept_models()
    in1k = [PATHS.probe_result(model, naming.IN1K, "all", seed) for model in models for seed in SEEDS]
    return {
        "seeds": [PATHS.concept_accuracy(model) for model in models],
        "ranking": PATHS.ranking(),
        "level_sets": [PATHS.level_set_ranking(name) for name in concept_level_sets()],
        "in1k": in1k if naming.IN1K in DATASETS else [],
    }


def concept_results_arguments(wildcards):
    rankings = " ".join(f"--level-set-ranking {name}={PATHS.level_set_ranking(name)}" for name in concept_level_sets())
    in1k = f" --in1k-seeds {' '.join(SEEDS)}" if naming.IN1K in DATASETS else ""
    return (
        f"--results-root {PATHS.root} --models {shlex.quote(models_json(models=concept_models()))}"
        f" --levels {' '.join(concept_levels())} --baseline {config['results']['baseline_model']}"
        f" --resamples {CONCEPTS_CONFIG['resamples']} --seed {CONCEPTS_CONFIG['seed']}"
        f" --outliers {CONCEPTS_CONFIG['outliers']}{in1k}"
        + (f" {rankings}" if rankings else "")
        + figure_exposures(concept_models())
    )


def concept_report(name, extension, caption, labels):
    path = PATHS.figure(name, extension) if extension in ("png", "pdf") else PATHS.table(name, extension)
    return report_output(path, caption=caption, category="Analyses", subcategory="Concepts", labels=labels)


def concept_outputs():
    """The per-model seed tables and concept-results' tables and figure; none when switched off."""
    if not concept_models():
        return []
    return [*(PATHS.concept_accuracy(model) for model in concept_models()), *PATHS.concept_outputs()]


def concept_tables(name):
    """A function listing concept-results' CSV table ``name`` where the run makes it: a
    leaderboard source."""
    return lambda: [PATHS.table(name, "csv")] if concept_models() else []


# what the results stage's leaderboard reads of this stage (functions/results.smk)
LEADERBOARD_SOURCES["concepts"] = concept_tables(CONCEPT_TABLE)
LEADERBOARD_SOURCES["concept_curve"] = concept_tables(CONCEPT_CURVE)
LEADERBOARD_SOURCES["detection_seeds"] = lambda: [PATHS.detection_seeds(model) for model in detection_models()]
