"""The plan stage: the cost model's counts and seconds on a problem counted by hand (the
linear probes and the k-NN), the plan table of a small config with and without the k-NN,
rate files, the comparison with measured jobs and its calibration, and `snakemake plan` on
the real-data config before any download."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from conftest import REPOSITORY, copy_of_demo, copy_workflow, snakemake
from imagenet_cog.plan.cost import Dataset, count_work, dataset_cost, own_job_seconds, own_job_stages, probe_run_seconds, project
from imagenet_cog.plan.measured import calibrated, compare
from imagenet_cog.plan.rates import RatesError, read_rates, write_rates
from imagenet_cog.plan.table import format_table, plan_rows

SCHEMA = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"
IMAGE_COUNTS = REPOSITORY / "resources" / "imagenet21k_fall11_image_counts.tsv"
PROBES = {"trials": 2, "epochs": 3, "batch_size": 1024, "seeds": [1], "shots": ["all"], "val_fraction": 0.2,
          "trials_per_batch": 1, "group": "seed"}
FEATURES = {"shard_size": 1000, "dtype": "float16", "group": "shard"}
SIMPLE_RATES = {"extraction_images_per_s": {"default": 100.0}, "extraction_shard_fixed_s": {"default": 1.0},
                "model_build_s": {"default": 2.0}, "checkpoint_load_s": {"default": 3.0},
                "probe_step_fixed_s": 1e-3, "probe_step_per_row_s": 1e-6, "probe_epoch_s": 0.01,
                "scoring_flops_per_s": 1e9, "read_bytes_per_s": 1e6, "prepare_bytes_per_s": 1e6,
                "job_start_s": 1.0, "cuda_start_s": 1.0, "compile_s": 1.0}
KNN_RATES = {"knn_flops_per_s": 1e9, "topk_values_per_s": 1e8}


def test_count_work_by_hand():
    data = Dataset("d", train=2048, test=100, classes=10, validation=400)
    work = count_work([data], 8, PROBES, FEATURES)["d"]
    # 3 train shards of 1000 + 1 test shard, one job each
    assert (work.images, work.shards, work.extraction_jobs, work.probe_jobs) == (2148, 4, 4, 1)
    # search on 2048 - 400 = 1648 rows: a batch of 1024 and one of 624, 2 trials x 3 epochs;
    # the final fit on 2048 rows: 2 batches of 1024, 3 epochs
    assert dict(work.trial_steps) == {1024: 6 + 6, 624: 6}
    assert work.trial_epochs == (2 + 1) * 3
    assert work.pass_epochs == 3 * (2 + 1)
    assert work.train_flops == 4.0 * 8 * 10 * 3 * (2 * 1648 + 2048)
    assert work.scoring_flops == 2.0 * 8 * 10 * (2 * 400 + 100)
    assert work.file_bytes == work.prepared_bytes == 2148 * 8 * 2


def test_project_by_hand_and_width_scaling():
    data = Dataset("d", train=2048, test=100, classes=10, validation=400)
    work = count_work([data], 8, PROBES, FEATURES)
    seconds = project(work, SIMPLE_RATES, "resnet50")["d"]
    assert seconds["extraction"] == pytest.approx(2148 / 100 + 4 * 1.0)
    assert seconds["extraction job starts"] == pytest.approx(4 * (1 + 1 + 2 + 3))
    steps = 12 * (1e-3 + 1024e-6) + 6 * (1e-3 + 624e-6) + 9 * 0.01
    assert seconds["probe steps"] == pytest.approx(steps)
    assert seconds["probe scoring"] == pytest.approx(2.0 * 8 * 10 * 900 / 1e9)
    assert seconds["probe loading"] == pytest.approx(2 * 2148 * 8 * 2 / 1e6)
    assert seconds["probe job starts"] == pytest.approx(3.0)
    # measured at 10 classes x 4 dims: a step of 10 x 8 costs twice as much
    scaled = project(work, {**SIMPLE_RATES, "probe_shape": [10, 4]}, "resnet50", 8, {"d": 10})["d"]
    assert scaled["probe steps"] == pytest.approx(2 * steps)


def test_knn_work_and_seconds_by_hand():
    data = Dataset("d", train=2048, test=100, classes=10, validation=400)
    probes = {**PROBES, "seeds": [1, 2], "shots": [1, "all"], "knn": {"k": [5, 20], "train_block": 1000}}
    work = count_work([data], 8, probes, FEATURES, own_job_kinds=("knn",))["d"]
    job = work.own_jobs["knn"]
    # one product with all 2048 training images (shared by the seeds) and one per seed with
    # N = 1 (10 images), each 2 D n_test n_train
    assert job.priced["knn_flops_per_s"] == 2.0 * 8 * 100 * (2048 + 10 + 10)
    # every similarity through a top-k; N = all spans 3 training blocks of 1000, so two merges
    # of the running top-20 with a block's (2 x 20 values per test image)
    assert job.priced["topk_values_per_s"] == 100 * (2048 + 2 * 2 * 20) + 2 * 100 * 10
    assert (job.jobs, job.results, job.file_bytes) == (1, 4, 2148 * 8 * 2)
    seconds = project({"d": work}, {**SIMPLE_RATES, **KNN_RATES}, "resnet50")["d"]
    assert seconds["knn products"] == pytest.approx(job.priced["knn_flops_per_s"] / 1e9)
    assert seconds["knn top-k"] == pytest.approx(job.priced["topk_values_per_s"] / 1e8)
    assert seconds["knn loading"] == pytest.approx(2 * 2148 * 8 * 2 / 1e6)
    assert seconds["knn job starts"] == pytest.approx(2.0)
    # the rules' wall-clock limit prices the job with the same stages
    assert own_job_seconds("knn", data, 8, probes, "float16", {**SIMPLE_RATES, **KNN_RATES}) == pytest.approx(
        sum(seconds[stage] for stage in own_job_stages("knn")))
    # without the k-NN no k-NN stage, and the linear probes' seconds are the same
    linear = project(count_work([data], 8, probes, FEATURES), SIMPLE_RATES, "resnet50")["d"]
    assert linear == {stage: value for stage, value in seconds.items() if stage not in own_job_stages("knn")}


def test_a_probe_runs_limit_is_priced_as_the_plan_prices_its_runs():
    """The rules' limit of one linear probe run (probe_run_seconds): over every N and seed of a
    job-per-run grid, the runs' prices add up to the plan's probe seconds of the dataset."""
    data = Dataset("d", train=2048, test=100, classes=10, validation=400)
    probes = {**PROBES, "seeds": [1, 2], "shots": [1, "all"]}
    rates = {**SIMPLE_RATES, "probe_shape": [10, 4]}
    runs = [probe_run_seconds(data, 8, probes, "float16", rates, str(shots)) for shots in probes["shots"]
            for _ in probes["seeds"]]
    assert sum(runs) == pytest.approx(dataset_cost(data, 8, probes, FEATURES, rates, "resnet50").probe_s)
    assert runs[0] < runs[-1]  # N = 1 trains on 10 rows, N = all on 2048
    assert probe_run_seconds(data, 8, probes, "float16", rates) == runs[-1]


def small_config(**overrides) -> dict:
    config = {"mode": "demo", "datasets": ["in1k", "l1"], "results_dir": "results",
              "demo": {"concepts_per_dataset": 4, "train_images_per_concept": 10, "test_images_per_concept": 5},
              "models": {"m": {"arch": "resnet50"}, "mine": {"arch": "custom", "factory": "my.module:build"}},
              "probes": {"seeds": [1, 2], "shots": [1, "all"], "trials": 2, "epochs": 3, "group": "seed"},
              "features": {"group": "shard"}, **overrides}
    validate(config, str(SCHEMA))  # fills the schema's defaults
    return config


def rates_file(tmp_path: Path, values: dict = SIMPLE_RATES) -> Path:
    path = tmp_path / "rates.yaml"
    path.write_text(yaml.safe_dump({"device": "Test GPU", "rates": {
        key: {"value": value, "kind": "measured" if key != "compile_s" else "projection", "where": "by hand"}
        for key, value in values.items()}}))
    return path


def test_plan_rows_of_a_small_config(tmp_path):
    rows, notes = plan_rows(small_config(), IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=2)
    by_stage = {(row.stage, row.model): row for row in rows}
    extraction, probes = by_stage[("extraction", "m")], by_stage[("probes", "m")]
    # two datasets of 4 concepts x (10 + 5) images, one shard per split
    assert (extraction.jobs, extraction.images_read) == (4, 120)
    assert extraction.bytes_written == 120 * 2048 * 2
    # 2 datasets x 2 N x 2 seeds, each (2 trials + final fit) x 3 epochs
    assert (probes.jobs, probes.trial_epochs) == (8, 72)
    # journals and results of every run, float32 classifiers of the N = all runs
    assert probes.bytes_written == 2 * (4 * (2 * 1000 + 2500) + 2 * 4 * 2049 * 4)
    total = by_stage[("total", "all models")]
    # and the per-concept scoring (analyses.concepts, on by default: test_plan_prices_the_concept_curve_by_hand)
    assert total.seconds == pytest.approx(extraction.seconds + probes.seconds + by_stage[("concepts", "m")].seconds)
    wall = rows[-1]
    assert wall.stage == "wall time on 2 GPUs" and wall.seconds == pytest.approx(max(total.seconds / 2,
                                                                                      probes.longest_job_s,
                                                                                      extraction.longest_job_s))
    assert any("not priced: model mine" in note for note in notes)
    assert any("compile_s" in note for note in notes if note.startswith("projected rates"))
    table = format_table(rows, notes)
    assert "Test GPU" in table and "wall time on 2 GPUs" in table


def test_a_projected_extraction_rate_follows_the_loader_workers_by_hand(tmp_path):
    """min(workers x a worker's rate, the device's): 7 workers are host-bound, 15 device-bound."""
    terms = {"extraction_host_images_per_s_per_worker": {"pil": 10.0, "tensor": 30.0},
             "extraction_device_images_per_s": {"resnet50": 120.0, "default": 200.0}}
    path = rates_file(tmp_path, {**SIMPLE_RATES, **terms})
    document = yaml.safe_load(path.read_text())
    document["rates"]["extraction_images_per_s"]["kind"] = "projection"
    path.write_text(yaml.safe_dump(document))
    rates = read_rates(path)
    assert rates.for_node(7).values["extraction_images_per_s"] == {"resnet50": 70.0, "default": 70.0}
    assert rates.for_node(15).values["extraction_images_per_s"] == {"resnet50": 120.0, "default": 150.0}
    assert rates.for_node(7, "tensor").values["extraction_images_per_s"]["resnet50"] == 120.0
    config = small_config(features={"group": "shard", "num_workers": 7})
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, rates, gpus=1, compare_workers=(15,))
    extraction = next(row for row in rows if row.stage == "extraction")
    # 120 images at 70 images/s, 4 shards, 4 job starts of 1 + 1 + 2 + 3 s
    assert extraction.seconds == pytest.approx(120 / 70 + 4 * 1.0 + 4 * 7.0)
    seven, fifteen = [note for note in notes if "loader workers" in note]
    assert seven.startswith("7 loader workers (8 cores per GPU): extraction at 70 images/s (resnet50")
    assert fifteen.startswith("15 loader workers (16 cores per GPU): extraction at 120 images/s")
    # a measured rate is kept whatever the workers
    measured = read_rates(rates_file(tmp_path, {**SIMPLE_RATES, **terms}))
    assert measured.for_node(7) is measured


def test_plan_prices_knn_when_the_config_runs_it(tmp_path):
    """probes.kinds with knn (set after validation): a k-NN row per model, the total larger by
    it; the plan without knn is unchanged by the k-NN rates; rates without them name the k-NN unpriced. Detection, which the k-NN rates
    price too, is off (test_plan_prices_detection_by_hand)."""
    config = small_config(analyses={"detection": {"enabled": False}})
    linear_rows, linear_notes = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=1)
    with_rates = read_rates(rates_file(tmp_path, {**SIMPLE_RATES, **KNN_RATES}))
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, with_rates, gpus=1)
    assert [row.values() for row in rows] == [row.values() for row in linear_rows] and notes == linear_notes
    config["probes"]["kinds"] = ["linear", "knn"]
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, with_rates, gpus=1)
    by_stage = {(row.stage, row.model): row for row in rows}
    knn = by_stage[("knn probes", "m")]
    # two datasets of 4 concepts x (10 train + 5 test), 2048-d: N = all once, N = 1 per seed
    flops = 2 * 2.0 * 2048 * 20 * (40 + 4 + 4)
    topk = 2 * 20 * (40 + 4 + 4)
    loading = 2 * 2 * 60 * 2048 * 2 / 1e6
    assert knn.jobs == 2 and knn.bytes_written == 2 * 4 * 2500
    assert knn.seconds == pytest.approx(flops / 1e9 + topk / 1e8 + loading + 2 * 2.0)
    linear_total, total = linear_rows[-2], rows[-2]
    assert total.seconds == pytest.approx(linear_total.seconds + knn.seconds) and total.jobs == linear_total.jobs + 2
    assert [row.values() for row in rows if row.stage != "knn probes"][:-2] == [row.values() for row in linear_rows][:-2]
    assert not any("k-NN" in note or "knn" in note for note in notes if note.startswith("not priced"))
    _, unpriced = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=1)
    assert any(note.startswith("not priced: the k-NN probe (the rates lack knn_flops_per_s") for note in unpriced)


def test_plan_prices_fine_tuning_by_hand(tmp_path):
    """finetune.enabled: a fine-tuning row per fine-tuned model, one job per dataset, its
    training images read every epoch; rates without the training rate name it unpriced."""
    config = small_config(finetune={"enabled": True, "models": ["m"], "gpus": 2, "recipe": {"epochs": 3}})
    rates = read_rates(rates_file(tmp_path, {**SIMPLE_RATES, "finetune_images_per_s": {"default": 10.0}}))
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, rates, gpus=1)
    by_stage = {(row.stage, row.model): row for row in rows}
    finetuned = by_stage[("fine-tuning", "m")]
    # each dataset: 4 concepts x 10 training images x 3 epochs at 10/s, 20 test images at the
    # extraction's 100/s, a start of 1 + 1 + 2 + 3 s; a job's time spread over its 2 GPUs
    job = 40 * 3 / 10 + 20 / 100 + 7
    assert (finetuned.jobs, finetuned.images_read) == (2, 2 * (40 * 3 + 20))
    assert finetuned.seconds == pytest.approx(2 * job) and finetuned.longest_job_s == pytest.approx(job / 2)
    assert ("fine-tuning", "mine") not in by_stage
    without, _ = plan_rows(small_config(), IMAGE_COUNTS, None, rates, gpus=1)
    assert rows[-2].seconds == pytest.approx(without[-2].seconds + finetuned.seconds)
    _, unpriced = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=1)
    assert any(note.startswith("not priced: fine-tuning (the rates lack finetune_images_per_s") for note in unpriced)


def test_plan_prices_the_zero_shot_probe_by_hand(tmp_path):
    """probes.kinds: zeroshot: a zero-shot row per image-text model, a classifier job and a
    scoring job per dataset and for the open set; rates without the text rate name it unpriced."""
    config = small_config(models={"clip": {"arch": "open_clip/ViT-B-32", "weights": "random"}, "m": {"arch": "resnet50"}})
    config["probes"]["kinds"] = ["linear", "zeroshot"]
    config["probes"]["zeroshot"]["templates"] = "simple"
    rates = read_rates(rates_file(tmp_path, {**SIMPLE_RATES, "text_prompts_per_s": {"default": 70.0}}))
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, rates, gpus=1)
    by_stage = {(row.stage, row.model): row for row in rows}
    assert ("zero-shot", "m") not in by_stage
    zeroshot = by_stage[("zero-shot", "clip")]

    def job(classes, test):
        # 7 templates per name at 70 prompts/s and a start of 1 + 1 + 2 + 3 s; the 512-d float16
        # test features read and prepared at 1 MB/s each, 2 x 512 FLOPs per image and concept at
        # 1 GFLOP/s, and a start of 1 + 1 s
        return classes * 7 / 70 + 7 + test * 512 * 2 * 2 / 1e6 + 2 * 512 * test * classes / 1e9 + 2

    # IN-1K and L1: 4 concepts x 5 test images each; the open set: 8 concepts, 40 test images
    assert zeroshot.jobs == 6
    assert zeroshot.seconds == pytest.approx(2 * job(4, 20) + job(8, 40))
    assert zeroshot.bytes_written == (4 + 4 + 8) * 512 * 4 + 3 * 2500
    assert not any("zeroshot" in note for note in notes if note.startswith("not priced"))
    config["probes"]["zeroshot"]["open_set"] = False
    closed, _ = plan_rows(config, IMAGE_COUNTS, None, rates, gpus=1)
    assert {(r.stage, r.model): r for r in closed}[("zero-shot", "clip")].jobs == 4
    _, unpriced = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=1)
    assert any(note.startswith("not priced: the zero-shot probe (the rates lack text_prompts_per_s") for note in unpriced)


def test_plan_prices_captioning_by_hand(tmp_path):
    """analyses.captions.enabled: a captioning row (a job per captioned dataset, its captioned
    test images) and an auto-descriptions row (per dataset, and per result model's clusters,
    every caption through the text tower); rates without the caption rates name it unpriced."""
    captions = {"enabled": True, "captioner": {"name": "coca", "arch": "open_clip/coca_ViT-L-14", "weights": "random"},
                "images_per_concept": 3}
    config = small_config(analyses={"kmeans": {"enabled": True}, "captions": captions})
    caption_rates = {"caption_images_per_s": {"default": 2.0}, "caption_text_per_s": {"default": 4.0}}
    rates = read_rates(rates_file(tmp_path, {**SIMPLE_RATES, **caption_rates}))
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, rates, gpus=1)
    by_stage = {(row.stage, row.model): row for row in rows}
    captioning, describing = by_stage[("captioning", "coca")], by_stage[("auto-descriptions", "coca")]
    # each dataset: 4 concepts x 3 of their 5 test images at 2/s, a start of 1 + 1 + 2 + 3 s
    assert (captioning.jobs, captioning.images_read) == (2, 2 * 12)
    assert captioning.seconds == pytest.approx(2 * (12 / 2 + 7)) and captioning.longest_job_s == pytest.approx(13)
    # each dataset: its descriptions and those of the clusters of the 2 models, each job its
    # 12 captions at 4/s and a start
    assert describing.jobs == 2 * 3 and describing.seconds == pytest.approx(6 * (12 / 4 + 7))
    without, _ = plan_rows(small_config(analyses={"kmeans": {"enabled": True}}), IMAGE_COUNTS, None, rates, gpus=1)
    assert rows[-2].seconds == pytest.approx(without[-2].seconds + captioning.seconds + describing.seconds)
    assert not [note for note in notes if "class-level captioning" in note]
    _, unpriced = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=1)
    assert "not priced: class-level captioning (the rates lack caption_images_per_s, caption_text_per_s: " \
           "resources/rates/h100.yaml has them)" in unpriced


def test_plan_names_the_kinds_it_does_not_price(tmp_path):
    config = small_config()
    config["probes"]["kinds"] = ["linear", "mlp", "pca", "knn"]
    _, notes = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path, {**SIMPLE_RATES, **KNN_RATES})), gpus=1)
    assert "not priced: the probe kinds mlp, pca" in notes


def test_rates_files(tmp_path):
    shipped = read_rates(REPOSITORY / "resources" / "rates" / "h100.yaml")
    assert "H100" in shipped.device and "probe_step_fixed_s" in shipped.projected_keys()
    assert shipped.prices("knn") and "knn_flops_per_s" in shipped.projected_keys(("knn_flops_per_s",))
    assert "scoring_flops_per_s" not in shipped.projected_keys()
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"device": "x", "rates": {"job_start_s": {"value": 1}}}))
    with pytest.raises(RatesError, match="broken.yaml' lacks extraction_images_per_s"):
        read_rates(broken)
    written = tmp_path / "again.yaml"
    write_rates(written, shipped, "by hand")
    assert read_rates(written).values == shipped.values


def test_measured_jobs_against_projection_and_calibration(tmp_path):
    config = small_config(datasets=["in1k"])
    config["probes"]["kinds"] = ["linear", "knn"]  # after validation: see the test above
    rates = read_rates(rates_file(tmp_path, {**SIMPLE_RATES, **KNN_RATES}))
    benchmarks = tmp_path / "benchmarks"
    for relative, seconds in (("features/m/in1k/train/shard-0.tsv", 40.0), ("features/m/in1k/test/shard-0.tsv", 40.0),
                              ("probes/m/in1k/shots-all/seed-1.tsv", 9.0), ("probes/m/in1k/mlp/shots-1/seed-1.tsv", 1.0),
                              ("probes/m/in1k/knn.tsv", 12.0)):
        (benchmarks / relative).parent.mkdir(parents=True, exist_ok=True)
        (benchmarks / relative).write_text(f"s\th:m:s\n{seconds}\t0:00:{seconds:02.0f}\n")
    rows, widths = compare(config, IMAGE_COUNTS, None, rates, benchmarks)
    # mlp left out
    assert {(row.rule, row.jobs) for row in rows} == {("extract_features", 2), ("probe", 1), ("probe_knn", 1)}
    extraction = next(row for row in rows if row.stage == "extraction")
    assert extraction.seconds == 80.0 and extraction.projected > 0
    mine = calibrated(rates, rows, widths, "my GPU")
    assert mine.kinds["knn_flops_per_s"] == "measured" and mine.values["knn_flops_per_s"] != 1e9
    again, _ = compare(config, IMAGE_COUNTS, None, mine, benchmarks)
    for row in again:
        assert row.seconds == pytest.approx(row.projected, rel=1e-6), row


def test_plan_target_before_any_download(tmp_path):
    """config/imagenet.yaml with data roots that do not exist (a tar layout named) and the 31
    models' checkpoints not fetched: the plan is written, no image read; the models that break
    the benchmark's premise are named first."""
    workdir = copy_workflow(tmp_path / "copy")
    (workdir / "later.yaml").write_text(yaml.safe_dump({"data": {
        "in21k_root": str(tmp_path / "nowhere" / "winter21_whole"), "in1k_root": str(tmp_path / "nowhere" / "in1k"),
        "in1k_layout": "tars"}}))
    result = snakemake(workdir, "--cores", "1", "--configfile", str(REPOSITORY / "config" / "imagenet.yaml"),
                       str(REPOSITORY / "config" / "paper_models.yaml"),
                       "later.yaml", "--config", "plan_gpus=8", "--", "plan")
    results = yaml.safe_load((REPOSITORY / "config" / "imagenet.yaml").read_text())["results_dir"]
    with open(workdir / results / "plan.tsv", newline="") as stream:
        rows = list(csv.DictReader(stream, delimiter="\t"))
    models = {row["model"] for row in rows} - {"all models"}
    assert len(models) == 31
    resnet = next(row for row in rows if row["stage"] == "extraction" and row["model"] == "resnet50")
    # IN-1K's 1,331,167 images and five levels of ~1.18M (the main protocol: no pool), 2048-d float16 features
    assert 7_000_000 < int(resnet["images_read"]) < 7_500_000
    assert int(resnet["bytes_written"]) == int(resnet["images_read"]) * 2048 * 2
    assert rows[-1]["stage"] == "wall time on 8 GPUs"
    assert "wall time on 8 GPUs" in result.stdout
    assert not (workdir / "results").exists() and not list((workdir / results).glob("splits/*"))
    # the run's first screen names the paper's four web-data models, which break the premise (a note)
    assert "4 of 31 models were pretrained on more than IN-1K" in result.stderr
    web = next(line for line in result.stderr.splitlines() if line.startswith("  web ("))
    assert web.endswith("): mopro (webvision1), semi_sup (yfcc100m,in1k), semi_weakly_sup (ig1b,in1k), clip (wit400m)")


def file_state(root: Path) -> dict[str, int]:
    """Every file under root (Snakemake's own metadata left out) with its mtime."""
    return {str(path.relative_to(root)): path.stat().st_mtime_ns for path in root.rglob("*")
            if path.is_file() and ".snakemake" not in path.relative_to(root).parts}


def test_runs_with_their_own_results_folder_leave_the_demo_alone(demo_run, tmp_path):
    """Another configuration plans and runs a job beside a finished demo: every file of the
    demo keeps its content and mtime, and the new run's files are all under its folder."""
    finished = copy_of_demo(demo_run, tmp_path / "copy")
    before = file_state(finished)
    other = finished / "elsewhere"
    for target in ("plan", "elsewhere/levels/nltk_data"):
        snakemake(finished, "--cores", "1", "--config", "results_dir=elsewhere", "--", target)
    assert (other / "plan.tsv").is_file() and (other / "levels" / "nltk_data").is_dir()
    assert (other / "logs" / "levels" / "wordnet_corpus.log").is_file()
    assert (other / "logs" / "benchmarks" / "levels" / "wordnet_corpus.tsv").is_file()
    # runs of one job each: warm_start auto starts no server for them (its imports cost more)
    assert not (other / "logs" / "warm_start").exists()
    after = {name: mtime for name, mtime in file_state(finished).items() if not name.startswith("elsewhere/")}
    assert after == before


def test_plan_prices_detection_by_hand(tmp_path):
    """analyses.detection: a row per scored model, one job reading IN-1K's training and every
    test feature, priced by the k-NN probe's rates; rates without them name it unpriced."""
    config = small_config(analyses={"detection": {"k": 3}})
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path, {**SIMPLE_RATES, **KNN_RATES})),
                            gpus=1)
    detection = {(row.stage, row.model): row for row in rows}[("detection", "m")]
    # IN-1K: 4 concepts x 10 training images, 20 test images; L1: 20 test images; 2048-d float16
    # read and prepared at 1 MB/s each; 2 x 2048 FLOPs per query and training image at 1 GFLOP/s;
    # every similarity and k = 3 more (one training block) through the top-k at 1e8/s; the logits
    # of 2 seeds and the text classifier (2 x 2048 x 4 concepts per query) at 1 GFLOP/s; a start of 2 s
    expected = ((40 + 40) * 2048 * 2 * 2 / 1e6 + 2 * 2048 * 40 * 40 / 1e9 + 40 * (40 + 3) / 1e8
                + 2 * 2048 * 4 * 40 * 3 / 1e9 + 2)
    assert detection.jobs == 1 and detection.seconds == pytest.approx(expected)
    assert not [note for note in notes if "unseen-concept detection" in note]
    _, unpriced = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=1)
    assert any(note.startswith("not priced: unseen-concept detection") for note in unpriced)
    off, _ = plan_rows(small_config(analyses={"detection": {"enabled": False}}), IMAGE_COUNTS, None,
                       read_rates(rates_file(tmp_path, {**SIMPLE_RATES, **KNN_RATES})), gpus=1)
    assert not [row for row in off if row.stage == "detection"]


def test_plan_prices_the_concept_curve_by_hand(tmp_path):
    """analyses.concepts: a row per scored model, one job reading every level's test features and
    scoring them with each seed's N = all classifier; none when it is off."""
    config = small_config(analyses={"concepts": {"models": ["m"]}})
    rows, _ = plan_rows(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)), gpus=1)
    concepts = [row for row in rows if row.stage == "concepts"]
    # L1: 4 concepts x 5 test images, 2048-d float16 read and prepared at 1 MB/s each; the logits
    # of 2 seeds (2 x 2048 x 4 concepts per image) at 1 GFLOP/s; a start of 1 s
    expected = 20 * 2048 * 2 * 2 / 1e6 + 2 * 2048 * 4 * 20 * 2 / 1e9 + 1.0
    assert [(row.model, row.jobs) for row in concepts] == [("m", 1)]
    assert concepts[0].seconds == pytest.approx(expected)
    off, _ = plan_rows(small_config(analyses={"concepts": {"enabled": False}}), IMAGE_COUNTS, None,
                       read_rates(rates_file(tmp_path)), gpus=1)
    assert not [row for row in off if row.stage == "concepts"]


def test_plan_prices_a_series_per_checkpoint_and_in_all(tmp_path):
    """A series checkpoint of the series protocol is priced by it (N = all on one seed, two
    trials: here the run's fewer), in a row of its own, and the series in all; a model priced
    as a result model is as it was."""
    rates = read_rates(rates_file(tmp_path))
    without, _ = plan_rows(small_config(), IMAGE_COUNTS, None, rates, gpus=1)
    config = small_config()
    config["models"].update({"s@1": {"arch": "resnet50"}, "s@2": {"arch": "resnet50"}})  # as common/checkpoint_series.smk adds them
    protocol = {"series": "s", "name": "series", "shots": ["all"], "seeds": ["1"], "trials": 2, "knn_probe": False,
                "concepts": False}
    config["series_checkpoints"] = {"s@1": protocol, "s@2": protocol}
    rows, notes = plan_rows(config, IMAGE_COUNTS, None, rates, gpus=1)
    by_stage = {(row.stage, row.model): row for row in rows}
    one, all_of_them = by_stage[("series s", "s@1")], by_stage[("series s", "all 2 checkpoints")]
    extraction = by_stage[("extraction", "m")]
    # the extraction of m's datasets, and 2 datasets x 1 N x 1 seed, each (2 trials + final fit) x 3 epochs
    assert (one.jobs, one.images_read, one.trial_epochs) == (extraction.jobs + 2, extraction.images_read, 18)
    assert all_of_them.jobs == 2 * one.jobs and all_of_them.seconds == pytest.approx(2 * one.seconds)
    assert not any(row.model.startswith("s@") for row in rows if not row.stage.startswith("series"))
    assert [row.values() for row in rows if row.model == "m"] == [row.values() for row in without if row.model == "m"]
    total, before = by_stage[("total", "all models")], next(row for row in without if row.stage == "total")
    assert total.seconds == pytest.approx(before.seconds + 2 * one.seconds)
    assert any(note.startswith("series:") for note in notes)
