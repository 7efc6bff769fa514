# What every stage's rules share, one file each by what it holds, included here in this order
# (each uses what the ones before it define): the configuration's shipped files and the results
# layout (PATHS, below); common/run_lacks.smk, what the run lacks, refused once before any job;
# common/checkpoint_series.smk, a training run's checkpoints as models; common/grid.smk, the
# models, datasets, N and seeds, the wildcard constraints and each stage's models;
# common/jobs.smk, the jobs' environment and command, and how a local run starts and ends (warm
# start, job rate, failures' reasons); common/report.smk, the report's entries; common/models.smk,
# each model's spec, checks, results JSON and pretraining data. Each stage's input functions,
# checks and targets are in functions/<stage>.smk, which its rule file includes; the Snakefile
# includes the stages in order, so a stage may use what the stages before it define (as its rules
# read their outputs), never what a later one does.

import os

from imagenet_cog.core.layout import Layout


def shipped_file(path):
    """A relative path to a file this workflow ships (resources/...) is read beside the
    Snakefile when the working directory holds no file of that name."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    beside = os.path.join(workflow.basedir, path)
    return beside if os.path.exists(beside) else path


for section, key in (
    ("concepts", "image_counts"),
    ("concepts", "discarded_wnids"),
    ("results", "published_top1"),
    ("plan", "rates"),
):
    config[section][key] = shipped_file(config[section][key])


# Every output, log and benchmark of this run, under its own folder (results_dir).
PATHS = Layout(config["results_dir"].rstrip("/"))


include: "common/run_lacks.smk"
include: "common/checkpoint_series.smk"
include: "common/grid.smk"
include: "common/jobs.smk"
include: "common/report.smk"
include: "common/models.smk"
