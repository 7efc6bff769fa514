"""Shared fixtures: the repository as a Snakemake working copy, one finished demo run, and
a small world of generated JPEGs with its split table (extraction tests).

The end-to-end, staleness and fault tests all start from one complete run of the demo
workflow in a temporary copy of the repository, made once per test run: under pytest-xdist
(`make test` runs one worker per core and one more) the first worker that needs it builds it behind a file
lock, the others wait for it and then read the same folder. Tests that change a finished demo
change a private copy of it (copy_of_demo).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from filelock import FileLock
from PIL import Image

REPOSITORY = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ["Snakefile", "config.yaml", "workflow", "resources", "envs", "slurm", "profiles"]


def copy_workflow(destination: Path) -> Path:
    """A copy of the workflow's own files (no results) in ``destination``."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        source = REPOSITORY / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy2(source, destination / name)
    return destination


SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def snakemake_environment() -> dict[str, str]:
    """Rules run `python -m imagenet_cog`: the interpreter running the tests comes first."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{SNAKEMAKE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


# The suite's Snakemake calls start warm: one server per test process (imagenet_cog/warm_start.py,
# started for Snakemake's command line) has imported the libraries Snakemake and its plugins
# import, most of the ~5 CPU-seconds of a dry run of the demo; each call is a fork of it running
# Snakemake's `main` with the call's arguments, folder, environment and streams. A call whose
# environment differs where imports read it runs the snakemake script itself
# (tests/warm_snakemake.py). Snakemake's own workflow module is left to each call: it takes the
# run directory from the folder it is imported in.
WARM_SNAKEMAKE: dict = {}
SNAKEMAKE_PRELOAD = (
    "pandas", "pyarrow", "sqlmodel", "pulp", "jinja2", "tabulate", "psutil", "humanfriendly", "yaml",
    "snakemake_interface_executor_plugins.registry", "snakemake_interface_storage_plugins.registry",
    "snakemake_interface_report_plugins.registry", "snakemake_interface_logger_plugins.registry",
    "snakemake_interface_scheduler_plugins.registry", "snakemake_executor_plugin_slurm",
    "snakemake_executor_plugin_slurm_jobstep",
    # a timm model, a checkpoint or a plan's widths in the config: its read of the Snakefile
    # checks the model (timm's registry, the checkpoint's objects) or builds it on the meta device
    "torch", "torchvision", "timm",
)


def warm_snakemake_server() -> tuple[subprocess.Popen, str, Path]:
    """This test process's Snakemake server, its socket and its log, started at the first call."""
    from warm_snakemake import SNAKEMAKE_ENTRY

    from imagenet_cog.warm_start import launch_server

    if "server" not in WARM_SNAKEMAKE:
        WARM_SNAKEMAKE["log"] = Path(tempfile.mkdtemp(prefix="warm-snakemake-")) / "server.log"
        WARM_SNAKEMAKE["server"], WARM_SNAKEMAKE["socket"] = launch_server(
            sys.executable, str(WARM_SNAKEMAKE["log"]), list(SNAKEMAKE_PRELOAD), entry=SNAKEMAKE_ENTRY,
            environ=snakemake_environment())
    return WARM_SNAKEMAKE["server"], WARM_SNAKEMAKE["socket"], WARM_SNAKEMAKE["log"]


def served_jobs(log: Path) -> list[tuple[int, str]]:
    """(pid, command) of each job a warm-start server's log says it forked."""
    return [(int(pid), command) for pid, command in re.findall(r"^job (\d+): (\S+)$", log.read_text(), re.M)]


def snakemake_command(*arguments: str) -> list[str]:
    """The command line of `snakemake *arguments`, run warm."""
    return [sys.executable, str(Path(__file__).with_name("warm_snakemake.py")), warm_snakemake_server()[1],
            str(SNAKEMAKE), *arguments]


def snakemake(workdir: Path, *arguments: str, check: bool = True, timeout: int = 1500) -> subprocess.CompletedProcess:
    """Run Snakemake from this interpreter's environment in ``workdir``."""
    result = subprocess.run(
        snakemake_command(*arguments),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=snakemake_environment(),
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(arguments)} failed ({result.returncode}):\n"
            f"{result.stdout[-5000:]}\n{result.stderr[-10000:]}"
        )
    return result


JOB_HEADER = re.compile(r"^\s*(?:rule|localrule|checkpoint|localcheckpoint) (\w+):\s*$")
WILDCARDS = re.compile(r"^\s*wildcards: (.*)$")


def planned_jobs(workdir: Path, *arguments: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job a dry run of ``snakemake *arguments`` plans."""
    return dry_run(workdir, *arguments)[0]


def dry_run(workdir: Path, *arguments: str) -> tuple[list[tuple[str, dict[str, str]]], subprocess.CompletedProcess]:
    """(rule, wildcards) of every job a dry run of ``snakemake *arguments`` plans, and its result."""
    result = snakemake(workdir, "--cores", "2", "--dry-run", *arguments)
    jobs = jobs_listed(result.stdout)
    if not jobs and "Nothing to be done" not in result.stdout + result.stderr:
        raise AssertionError(f"no jobs parsed from the dry run:\n{result.stdout[-3000:]}")
    return jobs, result


def jobs_listed(output: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job a dry run's ``output`` lists."""
    jobs: list[tuple[str, dict[str, str]]] = []
    for line in output.splitlines():
        header = JOB_HEADER.match(line)
        if header:
            jobs.append((header.group(1), {}))
            continue
        wildcards = WILDCARDS.match(line)
        if wildcards and jobs:
            jobs[-1][1].update(pair.split("=", 1) for pair in wildcards.group(1).split(", "))
    return jobs


def refused_overlay(workdir: Path, settings: dict, name: str = "overlay.yaml") -> str:
    """Snakemake's output (stdout and stderr) from a dry run of ``workdir`` with the config
    overlay ``settings``, written to ``workdir/name``, which a config check must refuse."""
    (workdir / name).write_text(yaml.safe_dump(settings))
    result = snakemake(workdir, "--dry-run", "--cores", "1", "--configfile", name, check=False)
    assert result.returncode != 0, f"the overlay {settings} was accepted:\n{result.stdout[-3000:]}"
    return result.stdout + result.stderr


def read_run_config(path: Path) -> dict:
    """A run's config.yaml with the models its stages run for: a series entry (``checkpoints``)
    is no model of its own, its checkpoints are, on the series protocol alone (models/series.py)."""
    config = yaml.safe_load(Path(path).read_text())
    config["models"] = {name: entry for name, entry in config["models"].items() if "checkpoints" not in entry}
    return config


def stage_model_names(config: dict, setting: str) -> list[str]:
    """The models a stage of ``config`` runs for, as common/grid.smk's stage_models picks them: the
    list at the dotted ``setting`` (a section's ``models``, or the list itself, as
    "probes.kind_models.knn"), null meaning results.models, itself null for every model."""
    section = config
    for key in setting.split("."):
        section = (section or {}).get(key)
    selected = section.get("models") if isinstance(section, dict) else section
    return list(selected or config.get("results", {}).get("models") or config["models"])


def other_probe_kinds(config: dict) -> list[str]:
    """The probe kinds a config runs on their own grid (rule probe_kind): the MLP kinds, and
    pca-<d> per d (not knn, which runs on the linear probe's grid in jobs of its own, nor
    zeroshot, which has no grid)."""
    probes = config["probes"]
    kinds = [kind for kind in probes["kinds"] if kind not in ("linear", "pca", "knn", "zeroshot")]
    return kinds + ([f"pca-{dim}" for dim in probes["pca_dims"]] if "pca" in probes["kinds"] else [])


def other_kind_probes_per_dataset(config: dict) -> int:
    """Probe runs of the kinds besides linear per model and dataset, on their own grid."""
    probes = config["probes"]
    shots = probes.get("other_kinds_shots") or probes["shots"]
    seeds = probes.get("other_kinds_seeds") or probes["seeds"]
    return len(other_probe_kinds(config)) * len(shots) * len(seeds)


def other_kind_probe_count(config: dict) -> int:
    """Probe runs (rule probe_kind) of the kinds besides linear on IN-1K and the levels, each
    kind for its own models (probes.kind_models)."""
    per_dataset = other_kind_probes_per_dataset(config) // max(len(other_probe_kinds(config)), 1)
    models = sum(len(stage_model_names(config, f"probes.kind_models.{kind.split('-')[0]}")) for kind in other_probe_kinds(config))
    return models * len(config["datasets"]) * per_dataset


def make_world(root: Path, concepts: int = 3, train: int = 5, test: int = 2, corrupt: tuple[str, ...] = ()) -> Path:
    """Generated JPEGs under root/images and their split table root/splits.tsv."""
    rng = np.random.default_rng(0)
    lines = ["path\twnid\tlabel\tsplit"]
    for label in range(concepts):
        wnid = f"n{label:08d}"
        (root / "images" / wnid).mkdir(parents=True, exist_ok=True)
        for number in range(train + test):
            relative = f"{wnid}/{wnid}_{number}.JPEG"
            size = (40 + 3 * number, 36 + 5 * label)
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / "images" / relative)
            if relative in corrupt:
                (root / "images" / relative).write_bytes(b"\xff\xd8\xff\xe0 truncated")
            lines.append(f"{relative}\t{wnid}\t{label}\t{'train' if number < train else 'test'}")
    (root / "splits.tsv").write_text("\n".join(lines) + "\n")
    return root / "splits.tsv"


def run_temp_root(tmp_path_factory) -> Path:
    """The temporary folder of the whole test run: under pytest-xdist each worker's base
    folder (popen-gwN) lies in it, so what is made here is shared by the workers."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """A working copy in which the whole demo workflow has run to completion, on every core:
    built by the first worker that asks; a failed build is reported to every worker that asks
    rather than built again. What the run printed is kept beside the copy (``demo_screen``)."""
    root = run_temp_root(tmp_path_factory)
    workdir, failure = root / "demo" / "workflow-copy", root / "demo.failed"
    with FileLock(root / "demo.lock"):
        if failure.exists():
            raise AssertionError(f"the shared demo run failed in another worker:\n{failure.read_text()}")
        if not (root / "demo.done").exists():
            try:
                result = snakemake(copy_workflow(workdir), "--cores", str(os.cpu_count() or 1))
            except AssertionError as error:
                failure.write_text(str(error))
                raise
            demo_screen(workdir).write_text(result.stdout + result.stderr)
            (root / "demo.done").touch()
    return workdir


def demo_screen(demo_run: Path) -> Path:
    """The file that holds what the demo's run printed (its stdout and stderr)."""
    return demo_run.with_name("screen.txt")


# A warning a library or the workflow prints: Python's warnings (`file:line: SomeWarning: ...`),
# logging's and docutils' levels (`WARNING`, `(WARNING/2)`), deprecations
WARNING_LINE = re.compile(r"(?i)\bwarn(ing|ings)?\b|deprecat")


def warning_lines(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if WARNING_LINE.search(line)]


def copy_of_demo(demo_run: Path, destination: Path) -> Path:
    """A private copy of the finished demo, modification times kept (so that Snakemake sees
    what the demo left), without a lock another test's Snakemake may hold in the shared one."""
    shutil.copytree(demo_run, destination, symlinks=True, copy_function=shutil.copy2,
                    ignore=shutil.ignore_patterns("locks"))
    return destination


def pytest_collection_modifyitems(items):
    """The longest waits first: the SLURM test, which mostly waits on its queue, beside the
    demo's build on every core; then the modules that read the finished demo; then the other
    heavy ones (workflow runs of their own, benchmark scripts, compilers); the light ones last,
    so that no long module is left running alone at the end of a parallel run."""
    def modules(marked) -> set[str]:
        return {item.module.__name__ for item in items if marked(item)}

    slurm_modules = modules(lambda item: item.get_closest_marker("slurm"))
    demo_modules = modules(lambda item: "demo_run" in item.fixturenames)
    heavy_modules = modules(lambda item: item.get_closest_marker("heavy") or item.get_closest_marker("e2e"))
    items.sort(key=lambda item: (item.module.__name__ not in slurm_modules, item.module.__name__ not in demo_modules,
                                 item.module.__name__ not in heavy_modules))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a test module: probes this small gain nothing from threads, and
    on a busy machine threads spin."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# CPU seconds per test, beside pytest's wall-clock --durations: on two workers sharing two cores a
# test's wall time counts the other worker's load, while its CPU seconds (its process and every
# child it waited for: Snakemake, its jobs, the warm-start server's forks) are what it costs the
# suite. A module fixture's cost counts in the first test that asks for it.
def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=0, metavar="N",
                     help="list the N tests that used the most CPU seconds (0: none)")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _snakemake_server_cpu_seconds()


def _snakemake_server_cpu_seconds() -> float:
    """The Snakemake server's CPU, its finished forks' included (it waits for each): the
    Snakemake runs a test asked for, though not children of the test's process."""
    if "server" not in WARM_SNAKEMAKE:
        return 0.0
    try:
        fields = Path(f"/proc/{WARM_SNAKEMAKE['server'].pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # ended: its CPU is the test process's children's now
        return 0.0
    # utime, stime, cutime, cstime (proc(5)), after the state at index 0
    return sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def pytest_sessionfinish(session):
    if "server" in WARM_SNAKEMAKE:
        WARM_SNAKEMAKE["server"].terminate()
        WARM_SNAKEMAKE["server"].wait(timeout=60)
        shutil.rmtree(WARM_SNAKEMAKE["log"].parent, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[CPU_AT_SETUP] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown" and CPU_AT_SETUP in item.stash:
        report.user_properties.append(("cpu_s", _cpu_seconds() - item.stash[CPU_AT_SETUP]))


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "cpu_s":
            CPU_BY_TEST[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, config):
    count = config.getoption("--cpu-durations")
    if not count or not CPU_BY_TEST:
        return
    terminalreporter.write_sep("=", f"{count} tests that used the most CPU (of {sum(CPU_BY_TEST.values()):.0f} s in all)")
    for nodeid, seconds in sorted(CPU_BY_TEST.items(), key=lambda pair: -pair[1])[:count]:
        terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")


CPU_AT_SETUP = pytest.StashKey[float]()
CPU_BY_TEST: dict[str, float] = {}
