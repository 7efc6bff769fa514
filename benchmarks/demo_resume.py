"""A killed demo resumes to the same tables: one demo run never killed, then one run per
moment killed with SIGKILL (Snakemake and its jobs at once, as a lost node or an OOM killer
would) once that many of its jobs have finished, unlocked and run again to the end. Every
table of ``results/tables`` but the timings (the timings tables, the CSV tables' columns of
seconds) is compared byte for byte with the uninterrupted run's, and the script prints, per
moment, the jobs done when it was killed, the seconds of each part and the tables that differ
(none, when resuming is exact).

Each run is a fresh copy of the workflow (the tests' ``copy_workflow``) under
``--workdir``; ``--baseline`` reuses a finished demo's copy instead of running the first.
Several demo runs: ~15 minutes on 2 idle cores for the default three moments.

    python benchmarks/demo_resume.py                       # kills after 60, 140 and 220 jobs
    python benchmarks/demo_resume.py --moments 100 --baseline /tmp/demo --cores 2
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import copy_workflow  # noqa: E402

FINISHED = re.compile(r"^Finished job", re.M)


def snakemake(workdir: Path, *arguments: str, log: Path) -> subprocess.Popen:
    """Snakemake from this interpreter's environment, in a process group of its own."""
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with open(log, "a") as sink:
        return subprocess.Popen([str(Path(sys.executable).with_name("snakemake")), *arguments], cwd=workdir,
                                env=environment, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def run_to_end(workdir: Path, cores: str, log: Path) -> float:
    started = time.perf_counter()
    if snakemake(workdir, "--cores", cores, log=log).wait() != 0:
        raise SystemExit(f"the run in {workdir} failed; see {log}")
    return time.perf_counter() - started


def killed_and_resumed(workdir: Path, cores: str, jobs: int, log: Path) -> tuple[int, float, float]:
    """Kill a run once ``jobs`` jobs have finished, then unlock and resume it: (jobs done, seconds to the
    kill, seconds of the resumed run)."""
    started = time.perf_counter()
    run = snakemake(workdir, "--cores", cores, log=log)
    while run.poll() is None and len(FINISHED.findall(log.read_text())) < jobs:
        time.sleep(0.2)
    if run.poll() is not None:
        raise SystemExit(f"the run in {workdir} ended before {jobs} jobs had finished; see {log}")
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    done, killed = len(FINISHED.findall(log.read_text())), time.perf_counter() - started
    if snakemake(workdir, "--unlock", log=log).wait() != 0:
        raise SystemExit(f"snakemake --unlock failed in {workdir}; see {log}")
    return done, killed, run_to_end(workdir, cores, log)


def tables(workdir: Path) -> dict[str, bytes]:
    """Every table of the run but the timings (the timings tables, and the columns of seconds,
    named ``*_s``, of the CSV tables), by its path under results/tables."""
    folder = workdir / "results" / "tables"
    return {str(path.relative_to(folder)): without_seconds(path) for path in sorted(folder.rglob("*"))
            if path.is_file() and "timings" not in path.name}


def without_seconds(path: Path) -> bytes:
    """The file's bytes; a CSV table's without its columns of seconds (a job's timing)."""
    if path.suffix != ".csv":
        return path.read_bytes()
    rows = list(csv.reader(io.StringIO(path.read_text())))
    kept = [column for column, name in enumerate(rows[0] if rows else []) if not name.endswith("_s")]
    return "\n".join(",".join(row[column] for column in kept if column < len(row)) for row in rows).encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moments", type=int, nargs="+", default=[60, 140, 220], help="finished jobs at each kill")
    parser.add_argument("--cores", default="2")
    parser.add_argument("--workdir", help="where the runs' copies go (default: a new temporary folder)")
    parser.add_argument("--baseline", help="a finished demo's copy to compare with, instead of running one")
    args = parser.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="demo-resume-"))
    if args.baseline:
        baseline = Path(args.baseline)
        print(f"uninterrupted: {baseline} (given)", flush=True)
    else:
        baseline = copy_workflow(root / "uninterrupted")
        seconds = run_to_end(baseline, args.cores, root / "uninterrupted.log")
        print(f"uninterrupted: {seconds:.0f} s", flush=True)
    runs = {}
    for jobs in args.moments:
        workdir = copy_workflow(root / f"killed-{jobs}")
        runs[jobs] = (workdir, *killed_and_resumed(workdir, args.cores, jobs, root / f"killed-{jobs}.log"))
    expected = tables(baseline)  # read last: a given baseline may still be finishing
    if not expected:
        raise SystemExit(f"{baseline}/results/tables holds no table")
    differing = 0
    for workdir, done, killed, resumed in runs.values():
        got = tables(workdir)
        differ = sorted(name for name in expected.keys() | got.keys() if expected.get(name) != got.get(name))
        differing += bool(differ)
        print(f"killed after {done} jobs ({killed:.0f} s), resumed in {resumed:.0f} s: "
              f"{len(expected) - len(differ)} of {len(expected)} tables equal byte for byte"
              f"{'; differ: ' + ', '.join(differ) if differ else ''}", flush=True)
    print(f"copies and logs in {root}")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
