# How the jobs run: their environment and command line, and how a local run starts and ends (the
# warm-start server, the job rate, the failed jobs' reasons).

import datetime
import os
import shutil
import sys

# Jobs import the package from this checkout (so jobs on cluster nodes and in conda
# environments run the same code as the Snakefile). Set in the environment jobs inherit,
# not in their shell commands: a path there would make Snakemake see changed code, and
# re-run everything, whenever the project folder is moved or copied.
os.environ["PYTHONPATH"] = os.pathsep.join(
    path for path in (os.path.join(workflow.basedir, "workflow"), os.environ.get("PYTHONPATH")) if path
)


# How many images a job may leave out undecoded: in the environment, not the command, so that
# a limit raised after a failure re-runs no finished job (imagenet_cog.core.undecodable).
from imagenet_cog.core.undecodable import LIMIT_VARIABLE

os.environ[LIMIT_VARIABLE] = str(config["data"]["max_undecodable_fraction"])


# Where a job that fails on purpose (a damaged file, a full disk) writes its reason, which the
# run's screen shows once at its end (imagenet_cog.core.failures; onstart and onerror below).
from imagenet_cog.core.failures import REASONS_VARIABLE

os.environ[REASONS_VARIABLE] = os.path.abspath(PATHS.failure_reasons())


# Declared, so that executors which start jobs in a fresh environment (SLURM, remote
# storage) pass them on to them.
envvars:
    "PYTHONPATH",
    LIMIT_VARIABLE,
    REASONS_VARIABLE,
    SERIES_WEIGHTS_VARIABLE,


def python_command(command):
    """The shell prefix of a rule running one of the package's commands."""
    return f"python -m imagenet_cog {command}"


# This run's warm-start server (imagenet_cog/warm_start.py), when it has one.
WARM_START = {}


def jobs_are_local_processes():
    """Whether this run's jobs are processes of this machine (not a cluster's, not a job's own run)."""
    return workflow.local_exec and not (workflow.remote_exec or workflow.subprocess_exec)


# The server's imports (torch, pandas, seaborn...: ~5 CPU-seconds) cost more than the imports of
# the two jobs of a run that small: under auto, such a run starts its jobs cold.
WARM_START_MIN_JOBS = 3


def warm_start_wanted():
    """warm_start (schema): only where jobs are processes of this machine; auto means a demo run
    of a few jobs or more, whose jobs import for longer than they work (real jobs work for minutes)."""
    setting = config["warm_start"]
    if not jobs_are_local_processes() or setting == "never":
        return False
    # the run's jobs, known at onstart (jobs a checkpoint adds come on top)
    return setting == "always" or (config["mode"] == "demo" and len(workflow.dag) >= WARM_START_MIN_JOBS)


def drop_the_default_job_rate_limit():
    """A local run goes without Snakemake's default job rate limit: with it, every scheduling round
    while jobs wait for cores schedules another one a second later, and each job's end starts such
    a chain, so the demo's 380 jobs took 25,699 rounds (18 s of CPU in job selection alone; the
    limiter's known fault, snakemake/snakemake PR 3744). Its cores limit a local run's jobs; a
    cluster run, or a limit set on the command line, keeps it: it paces submissions."""
    from imagenet_cog.core import snakemake_insides

    if jobs_are_local_processes():
        snakemake_insides.drop_the_default_job_rate_limit(workflow.scheduler)


def start_warm_start():
    from imagenet_cog.warm_start import TABLES_AND_FIGURES_PRELOAD, start_server
    from imagenet_cog.models.registry import is_hf_arch, is_open_clip_arch, is_timm_arch

    if not warm_start_wanted():
        return
    python = shutil.which("python")
    if python is None:
        return
    archs = [spec["arch"] for spec in config["models"].values()]
    uses_open_clip = any(is_open_clip_arch(arch) for arch in archs)
    # open_clip builds its image towers with timm
    uses_timm = uses_open_clip or any(is_timm_arch(arch) for arch in archs)
    uses_transformers = any(is_hf_arch(arch) for arch in archs)
    preload = [*TABLES_AND_FIGURES_PRELOAD] + (["timm"] if uses_timm else []) + (["open_clip"] if uses_open_clip else [])
    preload += ["transformers"] if uses_transformers else []
    # one log a run, as Snakemake's own: a run leaves the logs of the runs before it untouched
    log = PATHS.log(f"warm_start/{datetime.datetime.now():%Y-%m-%dT%H%M%S.%f}.log")
    WARM_START["server"] = start_server(python, log, preload)
    WARM_START["log"] = log


def forget_failure_reasons():
    """The run's start: the reasons of an earlier run's failed jobs are not this run's; spare
    reason files wait for a disk that fills."""
    from imagenet_cog.core.failures import prepare_reasons

    prepare_reasons(PATHS.failure_reasons())


def show_failure_reasons():
    """The run's end after a failure: why each job failed on purpose, each reason once."""
    from imagenet_cog.core.failures import reasons_report

    told = reasons_report(PATHS.failure_reasons())
    if told:
        print(told, file=sys.stderr, flush=True)


def stop_warm_start():
    if "server" in WARM_START:
        from imagenet_cog.warm_start import stop_server

        stop_server(WARM_START.pop("server"), WARM_START.pop("log"))
