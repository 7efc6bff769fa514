"""The warm start (imagenet_cog/warm_start.py): a job forked from the run's server
computes what a cold process does, reports its status and streams as one, is refused when
the server's interpreter environment differs, dies with its client, and the server ends with
the process it watches. That every job of the demo's build went through it is checked in
test_demo_size, and the demo's results against a cold run (the SLURM jobs) in test_slurm."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_probes_search import blobs, probe_command, write_feature_file
from warm_snakemake import SNAKEMAKE_ENTRY

from conftest import SNAKEMAKE, copy_workflow, dry_run, jobs_listed, served_jobs, snakemake_environment, warm_snakemake_server
from imagenet_cog.warm_start import (
    _INTEGER,
    _LENGTH,
    SOCKET_VARIABLE,
    _receive_exactly,
    identity,
    launch_server,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.heavy

OUTCOME = ("best_params", "val_top1", "test_top1", "test_top5", "trials", "n_train", "n_test")


@pytest.fixture
def features(tmp_path):
    write_feature_file(tmp_path / "train.h5", *blobs(classes=6))
    write_feature_file(tmp_path / "test.h5", *blobs(classes=6, seed=4))
    return tmp_path


@pytest.fixture
def server(tmp_path):
    log = tmp_path / "warm_start.log"
    started = start_server(sys.executable, str(log), [])
    yield log
    stop_server(started, str(log))


def cold_environment() -> dict:
    return {name: value for name, value in os.environ.items() if name != SOCKET_VARIABLE}


def wait_for(condition, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return found


def test_a_warm_job_writes_what_a_cold_one_does_and_fails_as_it_does(features, server):
    cold = subprocess.run(probe_command(features), env=cold_environment(), capture_output=True, text=True, timeout=300)
    assert cold.returncode == 0, cold.stderr
    cold_result = json.loads((features / "result.json").read_text())
    for made in ("result.json", "study.jsonl"):
        (features / made).unlink()

    warm = subprocess.run(probe_command(features), capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0, warm.stderr
    assert served_jobs(server) == [(served_jobs(server)[0][0], "probe")]
    warm_result = json.loads((features / "result.json").read_text())
    assert {key: warm_result[key] for key in OUTCOME} == {key: cold_result[key] for key in OUTCOME}
    assert "test_top1=" in warm.stderr  # the job's log lines reach the client's stderr

    failed = subprocess.run(probe_command(features, shots="64"), capture_output=True, text=True, timeout=300)
    assert len(served_jobs(server)) == 2
    assert failed.returncode == 1 and "fewer than shots=64" in failed.stderr
    unknown = subprocess.run([sys.executable, "-m", "imagenet_cog", "no-such-command"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "usage: python -m imagenet_cog" in unknown.stderr
    assert len(served_jobs(server)) == 3


def test_a_job_from_another_cpu_capability_runs_cold(features, tmp_path, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    started = start_server(sys.executable, str(tmp_path / "warm_start.log"), [])
    try:
        job = subprocess.run(probe_command(features), env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"},
                             capture_output=True, text=True, timeout=300)
        assert job.returncode == 0, job.stderr
        assert (features / "result.json").is_file()
        assert served_jobs(tmp_path / "warm_start.log") == []
    finally:
        stop_server(started, str(tmp_path / "warm_start.log"))


def test_a_server_of_another_command_runs_no_job(features, tmp_path, monkeypatch):
    log = tmp_path / "warm_start.log"
    started, socket_path = launch_server(sys.executable, str(log), [], entry=SNAKEMAKE_ENTRY)
    monkeypatch.setenv(SOCKET_VARIABLE, socket_path)
    try:
        job = subprocess.run(probe_command(features), capture_output=True, text=True, timeout=300)
        assert job.returncode == 0, job.stderr
        assert (features / "result.json").is_file() and served_jobs(log) == []
    finally:
        stop_server(started, str(log))


def test_the_suites_snakemake_calls_are_served_warm_and_plan_what_the_script_plans(tmp_path):
    workdir = copy_workflow(tmp_path / "workflow")
    cold = subprocess.run([str(SNAKEMAKE), "--dry-run", "--cores", "2"], cwd=workdir, capture_output=True, text=True,
                          env=snakemake_environment(), timeout=600)
    assert cold.returncode == 0, cold.stderr[-3000:]
    served = len(served_jobs(warm_snakemake_server()[2]))
    warm_jobs, warm = dry_run(workdir)
    assert len(served_jobs(warm_snakemake_server()[2])) == served + 1
    assert sorted(warm_jobs, key=repr) == sorted(jobs_listed(cold.stdout), key=repr) and len(warm_jobs) > 100
    assert warm.stderr == cold.stderr


def test_jobs_start_cold_when_the_server_cannot_import_what_it_preloads(features, tmp_path):
    log = tmp_path / "warm_start.log"
    started = start_server(sys.executable, str(log), ["no_such_module_anywhere"])
    try:
        job = subprocess.run(probe_command(features), capture_output=True, text=True, timeout=300)
        assert job.returncode == 0, job.stderr
        assert (features / "result.json").is_file()
        assert started.wait(timeout=60) == 0
        assert "No module named 'no_such_module_anywhere'" in log.read_text() and served_jobs(log) == []
    finally:
        stop_server(started, str(log))


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_a_stopped_client_stops_its_job(features, server, stop):
    long_search = probe_command(features, trials=50, epochs=100000)
    client = subprocess.Popen(long_search, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    job = wait_for(lambda: served_jobs(server))[0][0]
    client.send_signal(stop)
    assert client.wait(timeout=60) == (-signal.SIGKILL if stop == signal.SIGKILL else 128 + signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{job}").exists())
    assert not (features / "result.json").exists()


def test_a_stop_passed_on_as_the_job_is_forked_stops_it(tmp_path):
    """A client passes a stop on as soon as it has the child's pid: the child takes it once it
    has the job's handlers, not the server's (which would leave it running). Each job here
    waits on its stdin forever."""
    server, socket_path = launch_server(sys.executable, str(tmp_path / "warm_start.log"), [], entry="builtins:input")
    try:
        for _ in range(5):
            stdin, held_open = os.pipe()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection, open(os.devnull, "w") as discard:
                connection.connect(socket_path)
                payload = json.dumps({"identity": identity("builtins:input"), "argv": [], "program": "input",
                                      "cwd": str(tmp_path), "environ": dict(os.environ)}).encode()
                socket.send_fds(connection, [_LENGTH.pack(len(payload))], [stdin, discard.fileno(), discard.fileno()])
                connection.sendall(payload)
                child = _INTEGER.unpack(_receive_exactly(connection, _INTEGER.size))[0]
                os.kill(child, signal.SIGTERM)
                connection.settimeout(30)
                status = _INTEGER.unpack(_receive_exactly(connection, _INTEGER.size))[0]
            os.close(stdin)
            os.close(held_open)
            assert status == 128 + signal.SIGTERM
    finally:
        stop_server(server, str(tmp_path / "warm_start.log"))


def test_a_lost_server_costs_no_job_and_is_said_once_with_its_log(features, tmp_path, capsys):
    """SIGKILL to the server (an OOM killer) while it runs a job: the job dies with it, its
    client runs it again cold, the next job starts cold, and stopping the run says so once."""
    log = tmp_path / "warm_start.log"
    started = start_server(sys.executable, str(log), [])
    try:
        client = subprocess.Popen(probe_command(features, trials=2, epochs=200), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        job = wait_for(lambda: served_jobs(log))[0][0]
        started.kill()
        assert client.wait(timeout=600) == 0, client.stderr.read()[-2000:]
        assert "was lost while this job ran; running it again cold" in client.stderr.read()
        assert not Path(f"/proc/{job}").exists() and (features / "result.json").is_file()
        later = subprocess.run(probe_command(features, shots="2"), capture_output=True, text=True, timeout=300)
        assert later.returncode == 0 and len(served_jobs(log)) == 1, later.stderr[-2000:]
    finally:
        stop_server(started, str(log))
    said = capsys.readouterr().err
    assert said.count("warm start: the server was lost") == 1 and f"Its log: {log}" in said


def test_a_job_takes_the_servers_compiled_package_until_a_file_of_it_changes(tmp_path):
    """The server compiles the package once; a child takes that code for a file with the size and
    modification time it had (as Python's own .pyc files go by), and compiles a file changed
    since, as a cold job does. Here cli.py's usage line is edited to one of the same size."""
    shutil.copytree(Path(__file__).resolve().parents[1] / "workflow" / "imagenet_cog", tmp_path / "imagenet_cog",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # no .pyc written: only the server's compiled code can give a job the file's former text
    environment = {**cold_environment(), "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    log = tmp_path / "warm_start.log"
    server, socket_path = launch_server(sys.executable, str(log), [], environ=environment)
    cli = tmp_path / "imagenet_cog" / "cli.py"

    def usage_line() -> str:
        job = subprocess.run([sys.executable, "-m", "imagenet_cog", "--help"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path, env={**environment, SOCKET_VARIABLE: socket_path})
        assert job.returncode == 0, job.stderr
        return job.stderr.splitlines()[0]

    try:
        wait_for(lambda: "serving" in log.read_text())
        assert usage_line().startswith("usage: ")
        status = cli.stat()
        cli.write_text(cli.read_text().replace('"usage: python -m', '"USAGE: python -m'))
        os.utime(cli, ns=(status.st_atime_ns, status.st_mtime_ns))
        assert usage_line().startswith("usage: ")
        os.utime(cli, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
        assert usage_line().startswith("USAGE: ")
        assert len(served_jobs(log)) == 3
    finally:
        stop_server(server, str(log))


def test_the_server_ends_with_the_process_it_watches(tmp_path):
    watched = subprocess.Popen(["sleep", "2"])
    socket_path = tmp_path / "socket"
    server = subprocess.Popen([sys.executable, "-m", "imagenet_cog.warm_start", "--socket", str(socket_path),
                               "--watch", str(watched.pid)], stderr=subprocess.PIPE, text=True)
    wait_for(socket_path.exists)
    watched.wait()
    assert server.wait(timeout=60) == 0
    assert not socket_path.exists()
    assert "serving" in server.stderr.read()


# In a new interpreter: the preloaded libraries' exit work is turned off in the server, while a
# finalizer made afterwards (a job's own) still runs at exit.
EXIT_WORK_CHECK = """
import gc, sys, tempfile, weakref
import torch, torch._dynamo.utils
from imagenet_cog.warm_start import leave_the_imports_exit_work_undone
preloaded = [thing for thing in gc.get_objects() if isinstance(thing, weakref.finalize) and thing.atexit]
assert len(preloaded) > 100, len(preloaded)
leave_the_imports_exit_work_undone()
assert not any(thing.atexit for thing in preloaded)
# dynamo's exit report would call this: it leaves a mark if it runs
torch._dynamo.utils.compile_times = lambda **options: open(sys.argv[1], "w").write("ran") and ""
own = tempfile.TemporaryDirectory()
print(own.name)
"""


def test_the_server_leaves_its_imports_exit_work_undone_but_not_a_jobs(tmp_path):
    mark = tmp_path / "dynamo-report"
    result = subprocess.run([sys.executable, "-c", EXIT_WORK_CHECK, str(mark)], capture_output=True, text=True,
                            check=True)
    assert not mark.exists()
    # the job's own temporary folder was removed at its exit by its finalizer
    assert not Path(result.stdout.strip()).exists()
