"""Every command the README, docs/*.md and the config files' headers show a user runs as written.

Commands are read from fenced shell blocks, indented code blocks and inline code spans
(`snakemake ...`, `make ...`, `python -m imagenet_cog ...`), and from the `#   snakemake`
lines of config/*.yaml and slurm/config.yaml. Each is checked as written (a command shown
several times runs once):

- snakemake: Snakemake's own argument parser reads it; its config files and targets must
  exist; then it runs in one scratch copy of the workflow, as a dry run (`-n` added) except
  the cheap targets plan and needed_synsets, which run for real. config/imagenet.yaml's data
  roots point there at a small generated copy of ImageNet's release files;
- make: `make -n` (make's dry run) of the target;
- python -m imagenet_cog and hf: the subcommand's `--help` runs and names every option used
  (the python ones warm: forks of one server that has imported torch and the libraries the
  commands import, tests/warm_python.py).

What no machine here can run is in NOT_RUN_HERE with the reason; a test checks that every
command found is either checked or listed there, and that the list holds no stale entry.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from imagenet_world import synset_images, write_ilsvrc2012, write_outer_tar
from snakemake.cli import get_argument_parser
from warm_python import launch

from conftest import REPOSITORY, SNAKEMAKE, copy_workflow, served_jobs, snakemake, snakemake_environment
from imagenet_cog.warm_start import BASE_PRELOAD, TABLES_AND_FIGURES_PRELOAD, stop_server

pytestmark = pytest.mark.heavy

DOCS = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md"))]
# their header comments show how to run them
CONFIG_FILES = [*sorted((REPOSITORY / "config").glob("*.yaml")), REPOSITORY / "slurm" / "config.yaml"]
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
COMMAND_WORDS = re.compile(r"(snakemake|make|python3?|pytest|tar|hf|git|bash|pip|sbatch)\b")
INLINE_COMMAND = re.compile(r"`((?:snakemake|make|python -m imagenet_cog) [^`]*)`")
CHEAP_TARGETS = {"plan", "needed_synsets"}
REAL_RUN_CONFIG = "config/imagenet.yaml"

# the scale rehearsal's add-on files (docs/scale.md): every stage but fine-tuning
REHEARSAL_ADD_ONS = "config/level_sets.yaml config/balanced.yaml config/label_audit.yaml config/analyses.yaml"
NOT_RUN_HERE = {
    "snakemake --profile slurm": "needs a SLURM cluster; tests/test_slurm.py runs the profile on a one-node one",
    "snakemake --profile slurm --configfile config/imagenet.yaml": "needs a SLURM cluster and ImageNet",
    "snakemake --report results/report.html": "needs a finished demo run (make demo writes the report)",
    "python -m pytest tests/test_browser_sheets.py tests/test_browser_report.py tests/test_browser_leaderboard.py":
        "the browser tests themselves, on a demo build of their own (make test runs them)",
    "snakemake --cores 8 --configfile config/imagenet.yaml config/paper_models.yaml":
        "needs the 31 models' checkpoints, which only a download gives",
    "snakemake --cores 8 --configfile config/imagenet.yaml config/paper_models.yaml --config "
    "checkpoints_dir=/data/cog-checkpoints": "needs the 31 models' checkpoints, which only a download gives",
    "snakemake --cores 8 --configfile config/imagenet.yaml config/modern_models.yaml":
        "a dry run of every job of 15 models, kept out of the suite's budget; their plan (snakemake plan, the same files with the paper's) runs here",
    "snakemake --cores 8 --configfile few-shot.yaml": "a file of the reader's own, its content in the line's comment",
    "python -m imagenet_cog <command>": "a placeholder for any subcommand",
    "tar xzf winter21_whole.tar.gz -T <(sed 's|^|winter21_whole/|' results-imagenet/splits/needed_synsets.txt)":
        "needs the 1.1 TB Winter 2021 release",
    "git clone https://github.com/naver/cog && cd cog": "a download",
    "bash prepare_models/all.sh /data/cog-checkpoints": "the authors' download script",
    "git clone https://github.com/Separius/SimCLRv2-Pytorch && cd SimCLRv2-Pytorch": "a download",
    "python download.py r50_1x_sk0": "another repository's download script",
    "python convert.py r50_1x_sk0/model.ckpt-250228": "another repository's script, on a download",
    "git clone https://github.com/chigur/byol-convert && cd byol-convert": "a download",
    "python convert.py pretrain_res50x1.pkl pretrain_res50x1.pth.tar": "another repository's script, on a download",
    "snakemake needed_synsets --cores 1 --configfile config/imagenet.yaml config/level_sets.yaml rehearsal.yaml":
        "the scale rehearsal's overlay, its content shown beside it (tests/test_imagenet_tars.py plans needed_synsets)",
    "snakemake results-rehearsal/splits/summary.tsv results-rehearsal/splits/preflight.tsv --cores 2 --configfile "
    f"config/imagenet.yaml {REHEARSAL_ADD_ONS} rehearsal.yaml": "needs the rehearsal's 7.6 GB world (benchmarks/scale_world.py)",
    f"snakemake -n --cores 8 --configfile config/imagenet.yaml {REHEARSAL_ADD_ONS} config/paper_models.yaml rehearsal.yaml":
        "needs the rehearsal's split tables, 400 MB of them",
    "snakemake --report results-rehearsal/report.html --cores 1 --configfile config/imagenet.yaml "
    f"{REHEARSAL_ADD_ONS} config/paper_models.yaml rehearsal.yaml report-only.yaml":
        "needs the rehearsal's finished results stage",
}
# checked by their --help: as written they read checkpoints, the network or a paper-size world
HELP_CHECKED = ("python -m imagenet_cog ", "hf ", "python benchmarks/")


@dataclass(frozen=True)
class Command:
    doc: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc.relative_to(REPOSITORY)}:{self.line}: {self.text}"


def code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the shell fences and the indented code blocks."""
    found, fence, after_blank = [], None, True
    for number, line in enumerate(text.split("\n"), 1):
        if fence is not None:
            fence = None if line.startswith("```") else fence
            if fence in SHELL_FENCES:
                found.append((number, line))
        elif line.startswith("```"):
            fence = line[3:].strip()
        elif line.startswith("    ") and (after_blank or (found and found[-1][0] == number - 1)):
            found.append((number, line[4:]))
        after_blank = not line.strip()
    return found


def block_commands(doc: Path) -> list[Command]:
    """Shell lines of code blocks, continuations joined, trailing comments dropped."""
    commands, pending = [], None
    for number, line in code_lines(doc.read_text()):
        stripped = line.strip()
        if pending is not None:
            pending = Command(doc, pending.line, f"{pending.text} {stripped.rstrip(chr(92)).strip()}")
        elif COMMAND_WORDS.match(stripped):
            pending = Command(doc, number, stripped.rstrip("\\").strip())
        if pending is not None and not stripped.endswith("\\"):
            commands.append(Command(doc, pending.line, re.sub(r"\s+#.*$", "", pending.text)))
            pending = None
    return commands


def inline_commands(doc: Path) -> list[Command]:
    text = doc.read_text()
    return [Command(doc, text.count("\n", 0, found.start()) + 1, " ".join(found.group(1).split()))
            for found in INLINE_COMMAND.finditer(text)]


def comment_commands(path: Path) -> list[Command]:
    """The `#   snakemake ...` lines of a YAML file's comments."""
    lines = path.read_text().split("\n")
    return [Command(path, number, re.sub(r"\s+#.*$", "", found.group(1)))
            for number, line in enumerate(lines, 1) if (found := re.match(r"#\s{2,}(snakemake .*)", line))]


COMMANDS = [command for doc in DOCS for command in block_commands(doc) + inline_commands(doc)] + [
    command for path in CONFIG_FILES for command in comment_commands(path)]
CHECKED = [command for command in COMMANDS if command.text not in NOT_RUN_HERE]


def command_id(command: Command) -> str:
    return f"{command.doc.relative_to(REPOSITORY)}:{command.line}"


def test_every_command_shown_is_checked_or_listed_with_its_reason():
    checkable = ("snakemake ", "make ", *HELP_CHECKED)
    unchecked = [str(command) for command in CHECKED if not command.text.startswith(checkable)]
    assert unchecked == [], "commands neither checked here nor in NOT_RUN_HERE:\n" + "\n".join(unchecked)
    shown = {command.text for command in COMMANDS}
    assert sorted(set(NOT_RUN_HERE) - shown) == [], "NOT_RUN_HERE names commands no doc shows any more"
    assert len(COMMANDS) > 40 and any(command.text.startswith("snakemake plan ") for command in CHECKED)


def snakemake_arguments(command: Command):
    arguments = shlex.split(command.text)[1:]
    try:
        return arguments, get_argument_parser().parse_args(arguments)
    except SystemExit:
        pytest.fail(f"{command}: Snakemake's argument parser rejects it")


def known_rules(workdir: Path) -> set[str]:
    listed = snakemake(workdir, "--list-rules", "--cores", "1", "--configfile", REAL_RUN_CONFIG).stdout
    demo = snakemake(workdir, "--list-rules", "--cores", "1").stdout
    return {line.strip() for line in (listed + demo).splitlines() if re.fullmatch(r"\w+", line.strip())}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A copy of the workflow whose config/imagenet.yaml reads a tiny generated release, with
    the other config files laid over it (the paper's models, the fine-tuning control)."""
    base = tmp_path_factory.mktemp("docs-commands")
    workdir = copy_workflow(base / "workflow-copy")
    real = (REPOSITORY / REAL_RUN_CONFIG).read_text()
    in21k = write_outer_tar(base / "winter21_whole.tar", synset_images(["n00004475"], 2, size=20))
    write_ilsvrc2012(base / "ilsvrc2012", synset_images(["n01440764"], 2, size=20), synset_images(["n01440764"], 1, size=20))
    roots = yaml_roots(real)
    real = real.replace(roots["in21k_root"], str(in21k)).replace(roots["in1k_root"], str(base / "ilsvrc2012"))
    (workdir / "config").mkdir()
    (workdir / REAL_RUN_CONFIG).write_text(real)
    for overlay in sorted((REPOSITORY / "config").glob("*.yaml")):
        if overlay.name != Path(REAL_RUN_CONFIG).name:
            (workdir / "config" / overlay.name).write_text(overlay.read_text())
    return workdir


def yaml_roots(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\s+(in21k_root|in1k_root): (\S+)", text, re.M))


@pytest.fixture(scope="module")
def finished_runs() -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """Snakemake's answer to each distinct argument list: a command several docs show runs once."""
    return {}


@pytest.fixture(scope="module")
def rules(scratch) -> set[str]:
    return known_rules(scratch)


SNAKEMAKE_COMMANDS = [command for command in CHECKED if command.text.startswith("snakemake ")]


@pytest.mark.parametrize("command", SNAKEMAKE_COMMANDS, ids=command_id)
def test_snakemake_command_runs_as_written(command, scratch, rules, finished_runs):
    arguments, parsed = snakemake_arguments(command)
    for configfile in parsed.configfile or []:
        assert (REPOSITORY / configfile).is_file(), f"{command}: no config file {configfile}"
    unknown = [target for target in parsed.targets if target not in rules and not (REPOSITORY / target).exists()]
    assert unknown == [], f"{command}: {unknown} is neither a rule nor a file"
    dry = [] if set(parsed.targets) & CHEAP_TARGETS or parsed.dryrun else ["-n"]
    key = (*arguments, *dry)
    if key not in finished_runs:
        finished_runs[key] = snakemake(scratch, *key, check=False, timeout=300)
    result = finished_runs[key]
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("command", [c for c in CHECKED if c.text.startswith("make ")], ids=command_id)
def test_make_command_is_a_target_make_knows(command):
    result = subprocess.run(["make", "-n", *shlex.split(command.text)[1:]], cwd=REPOSITORY, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, f"{command}: make -n fails:\n{result.stderr}"


@pytest.fixture(scope="module")
def warm_python(tmp_path_factory):
    """`python ARGUMENTS` as the interpreter runs it, in a fork of a server started for this
    module that has imported what a run's jobs import, the environment both run with, and its log."""
    environment = {**snakemake_environment(),
                   "PYTHONPATH": os.pathsep.join(str(REPOSITORY / folder) for folder in ("workflow", "tests"))}
    log = tmp_path_factory.mktemp("warm-python") / "server.log"
    server, python = launch(str(log), [*BASE_PRELOAD, *TABLES_AND_FIGURES_PRELOAD], environment)
    yield python, environment, log
    stop_server(server, str(log))


def help_command(command: Command, python: list[str]) -> list[str]:
    """`python -m imagenet_cog SUB --help` (run by ``python``), or `hf` and its subcommand words with --help."""
    words = shlex.split(command.text)
    if words[:2] == ["python", "-m"]:
        return [*python, "-m", "imagenet_cog", words[3], "--help"]
    if words[0] == "python":  # a benchmark script, and its subcommand if it has one
        return [*python, str(REPOSITORY / words[1]), *itertools.takewhile(str.isalpha, words[2:3]), "--help"]
    return [str(SNAKEMAKE.with_name("hf")), *itertools.takewhile(str.isalpha, words[1:]), "--help"]


@pytest.mark.parametrize("command", [c for c in CHECKED if c.text.startswith(HELP_CHECKED)], ids=command_id)
def test_command_and_its_options_exist(command, warm_python):
    python, environment, log = warm_python
    served = len(served_jobs(log))
    result = subprocess.run(help_command(command, python), capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, f"{command}: --help fails:\n{result.stderr[-2000:]}"
    if command.text.startswith("python"):
        assert len(served_jobs(log)) == served + 1, f"{command}: not run by the warm server:\n{log.read_text()[-2000:]}"
    options = re.findall(r"(?<!\S)(--[\w-]+)", command.text)
    assert [option for option in options if option not in result.stdout] == [], f"{command}: unknown options"
