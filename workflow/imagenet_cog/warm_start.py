"""Warm start: a local run's jobs skip the seconds of importing torch.

A demo job does under a second of work after ~2.5 s of imports (torch, torchvision, h5py,
optuna), and the demo runs hundreds of them on two cores. On a local run (``warm_start``, see
the schema) the Snakefile's onstart starts one server per run that imports those libraries
once and then forks a child per job: ``python -m imagenet_cog <command>`` connects to it,
hands over its working directory, environment, arguments and its stdin/stdout/stderr, and
exits with the child's status. The child runs the same ``cli.run`` a cold process would,
so it computes what a cold process does (tests/test_warm_start.py compares a probe's results;
tests/test_slurm.py the demo's, warm, with the cold SLURM jobs').

A job runs cold, as before, when no server answers or when the server was started from
another interpreter, package folder or CPU-capability environment (:func:`identity`). The
server never imports the workflow's own modules (each child imports them, from code the server
compiled once where their files are unchanged), so code edited during a run is used by the next
job, as in a cold run; it never touches CUDA, so each
child initialises its own. It stops when the run ends (onsuccess/onerror) or when the
Snakemake process it watches is gone; a job whose client is killed is killed with it. A
server lost during the run (killed, out of memory) costs no job: the jobs it was running die
with it (nothing of them was renamed into place) and their clients run them again cold, the
jobs after it start cold, and the run's end says once that it was lost and where its log is.

The server runs whichever command it was started for (``--entry``, a job's ``cli.run`` by
default) and refuses a client that asks for another; the test suite runs its Snakemake calls
through one started for Snakemake's command line (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

# Every job imports this module to ask for a warm start, so the server's and the run's modules
# (subprocess, argparse, ctypes, ...) are imported where they are used: tens of ms a job.

SOCKET_VARIABLE = "IMAGENET_COG_WARM_START"
SOCKET_FOLDER_PREFIX = "imagenet-cog-warm-"
# Read by the preloaded libraries when they are imported: a job whose values differ from the
# server's would not get what a cold process gets.
IMPORT_TIME_ENVIRONMENT = (
    "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "PYTHONPATH", "PYTHONHASHSEED", "LD_LIBRARY_PATH",
    "LD_PRELOAD", "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE", "MPLBACKEND", "MPLCONFIGDIR",
)
# The command a job's child runs; a server may run another program's (tests/conftest.py runs the
# suite's Snakemake calls through one), and a client asks for the one it means.
JOB_ENTRY = "imagenet_cog.cli:run"
BASE_PRELOAD = ("numpy", "h5py", "optuna", "torch", "torchvision")
# What a run's results and analyses jobs import (pandas, scipy.stats or seaborn: ~3 s of imports
# before a second of work), preloaded by the run's server beside the models' libraries. pyplot is
# imported, its backend not chosen: core.plots chooses Agg in the child, as in a cold job.
TABLES_AND_FIGURES_PRELOAD = ("pandas", "scipy.stats", "sklearn.metrics", "matplotlib.pyplot", "seaborn")
_PR_SET_PDEATHSIG = 1
_STOPS = {signal.SIGTERM, signal.SIGINT}
_LENGTH = struct.Struct("!I")
_INTEGER = struct.Struct("!i")


def identity(entry: str = JOB_ENTRY) -> dict:
    """What must match between a job and the server for a forked child to equal a cold run."""
    return {
        "entry": entry,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "package": str(Path(__file__).resolve().parent),
        "environment": {name: os.environ.get(name) for name in IMPORT_TIME_ENVIRONMENT},
    }


def _receive_exactly(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


# --- the job's side -------------------------------------------------------------------------

def run_warm(argv: list[str], entry: str = JOB_ENTRY, socket_path: str | None = None,
             program: str | None = None) -> int | None:
    """Run ``argv`` in a child of the server (the one at ``socket_path``, else the run's), as
    ``program`` (sys.argv[0], this process's by default); None when the job must run cold."""
    path = socket_path or os.environ.get(SOCKET_VARIABLE)
    if not path:
        return None
    request = json.dumps({"identity": identity(entry), "argv": argv, "program": program or sys.argv[0],
                          "cwd": os.getcwd(), "environ": dict(os.environ)})
    payload = request.encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
        socket.send_fds(connection, [_LENGTH.pack(len(payload))], [0, 1, 2])
        connection.sendall(payload)
        reply = _receive_exactly(connection, _INTEGER.size)
    except OSError:  # no server, or one that stopped before taking the job: nothing ran yet
        reply = None
    child = _INTEGER.unpack(reply)[0] if reply else 0
    if child <= 0:
        connection.close()
        return None
    # Snakemake stops a job with SIGTERM/SIGINT to this process: the child gets it, and this
    # process exits only once the child has (no output renamed after the job is marked failed).
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, lambda number, frame: _signal_if_running(child, number))
    try:
        status = _receive_exactly(connection, _INTEGER.size)
    except OSError:
        status = None
    if status is None:
        # the server was lost (killed, out of memory): its child is gone with it before this
        # process runs the job again, cold; outputs are renamed into place only when complete
        _stop_and_wait(child)
        for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(stop, signal.SIG_DFL if stop != signal.SIGINT else signal.default_int_handler)
        print(f"warm start: the server at {path} was lost while this job ran; running it again cold", file=sys.stderr)
        return None
    return _INTEGER.unpack(status)[0]


def _stop_and_wait(pid: int, seconds: float = 60.0) -> None:
    """SIGKILL the server's child ``pid`` (not this process's child) and wait until it has ended."""
    import select

    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        _signal_if_running(pid)
        select.select([pidfd], [], [], seconds)  # readable once the process has exited
    finally:
        os.close(pidfd)


def _signal_if_running(pid: int, number: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:  # it has just ended: its status is on its way
        pass


# --- the run's side (the Snakefile's onstart, onsuccess and onerror) -------------------------

def start_server(python: str, log_path: str, preload: list[str]) -> subprocess.Popen:
    """Start this run's server and point the jobs Snakemake starts from now on at it."""
    server, socket_path = launch_server(python, log_path, [*BASE_PRELOAD, *preload])
    os.environ[SOCKET_VARIABLE] = socket_path
    return server


def launch_server(python: str, log_path: str, preload: list[str], entry: str = JOB_ENTRY,
                  environ: dict | None = None) -> tuple[subprocess.Popen, str]:
    """A server of ``entry`` watching this process, and its socket once it listens."""
    import subprocess
    import tempfile
    import time

    socket_path = os.path.join(tempfile.mkdtemp(prefix=SOCKET_FOLDER_PREFIX), "socket")
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        server = subprocess.Popen(
            [python, "-m", "imagenet_cog.warm_start", "--socket", socket_path, "--watch", str(os.getpid()),
             "--entry", entry, "--preload", *preload],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=environ,
        )
    deadline = time.monotonic() + 10
    while not os.path.exists(socket_path) and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return server, socket_path


def stop_server(server: subprocess.Popen, log_path: str) -> None:
    """Jobs after this start cold; the server ends once its children have (none, at a run's end).
    A server lost during the run (killed, out of memory) is said once, with its log."""
    import shutil
    import subprocess

    lost = server.poll()
    if lost is not None and lost != 0:
        how = f"killed by signal {-lost}" if lost < 0 else f"exit status {lost}"
        print(f"warm start: the server was lost during the run ({how}); the jobs it was running ran again cold, "
              f"and the jobs after it started cold. Its log: {log_path}", file=sys.stderr, flush=True)
    socket_path = os.environ.pop(SOCKET_VARIABLE, None)
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
    if socket_path:
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)


# --- the server's side ----------------------------------------------------------------------

def _peek(connection: socket.socket) -> bytes:
    """Empty once the peer has closed: a client sends nothing after its request."""
    try:
        return connection.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""


# The workflow's package compiled once in the server, by (file, mtime, size): each child imports
# the package afresh, and an interpreter that writes no bytecode (PYTHONDONTWRITEBYTECODE, as
# some CI machines set) compiled every module a job imports again, ~40 ms a job.
_PACKAGE_CODE: dict[tuple[str, int, int], object] = {}


def compile_package() -> None:
    """Compile this package's modules as their importer would, for the children to take."""
    from importlib.machinery import SourceFileLoader

    for path in Path(__file__).resolve().parent.rglob("*.py"):
        status = path.stat()
        loader = SourceFileLoader(path.stem, str(path))
        _PACKAGE_CODE[(str(path), status.st_mtime_ns, status.st_size)] = loader.source_to_code(path.read_bytes(), str(path))


def _take_compiled_package() -> None:
    """The child imports the package's modules from the server's compiled code where their
    files are those it compiled; a file changed since is compiled anew, as a cold job does."""
    from importlib.machinery import PathFinder, SourceFileLoader

    class CompiledLoader(SourceFileLoader):
        def get_code(self, fullname):
            status = os.stat(self.path)
            code = _PACKAGE_CODE.get((os.path.realpath(self.path), status.st_mtime_ns, status.st_size))
            return code if code is not None else super().get_code(fullname)

    class CompiledFinder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.split(".")[0] != __package__:
                return None
            spec = PathFinder.find_spec(name, path, target)
            if spec is not None and type(spec.loader) is SourceFileLoader:
                spec.loader = CompiledLoader(spec.loader.name, spec.loader.path)
            return spec

    sys.meta_path.insert(0, CompiledFinder)


def _run_child(entry: str, request: dict, streams: list[int]) -> None:
    """In the forked child: become the job's process, run its command, exit with its status."""
    import ctypes
    import importlib

    # a server that dies mid-job (killed, out of memory) takes its jobs with it: no output is
    # written after its client has reported the job failed
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    for target, descriptor in enumerate(streams):
        os.dup2(descriptor, target)
        os.close(descriptor)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["environ"])
    sys.argv = [request["program"], *request["argv"]]
    # the workflow's package is imported afresh, as in a cold process: from the child's sys.path,
    # where a Snakefile puts its own copy's folder first
    for name in [name for name in sys.modules if name.split(".")[0] == __package__]:
        del sys.modules[name]
    _take_compiled_package()
    status = 1
    try:
        module, function = entry.split(":")
        status = getattr(importlib.import_module(module), function)(request["argv"])
    except SystemExit as exit_request:
        code = exit_request.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int) and code is not None:
            print(code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(status)


class Server:
    """One listening socket; per job a connection, a forked child and the child's pidfd."""

    def __init__(self, path: str, watched_pid: int, entry: str):
        self.path = path
        self.watched_pid = watched_pid
        self.entry = entry
        self.identity = identity(entry)
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(128)
        self.selector.register(self.listener, selectors.EVENT_READ, ("listener", None))
        self.children: dict[int, tuple[socket.socket, int]] = {}
        self.stopping = False

    def _request(self, connection: socket.socket) -> tuple[dict | None, list[int]]:
        """The job's request and streams; no request when it is not one this server may run."""
        try:
            message, streams, _, _ = socket.recv_fds(connection, _LENGTH.size, 3)
            payload = _receive_exactly(connection, _LENGTH.unpack(message)[0]) if len(message) == _LENGTH.size else None
        except OSError:  # a client killed while it asked
            return None, []
        request = json.loads(payload) if payload else None
        if request is None or request["identity"] != self.identity or len(streams) != 3:
            return None, streams
        return request, streams

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        request, streams = self._request(connection)
        if request is None:
            for descriptor in streams:
                os.close(descriptor)
            with contextlib.suppress(OSError):  # the client then runs the job cold
                connection.sendall(_INTEGER.pack(0))
            connection.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        # a stop the client passes on at once reaches the child after it has the job's handlers,
        # not the server's (which would only mark its copy of the server as stopping)
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        pid = os.fork()
        if pid == 0:
            self._close_in_child(connection)
            _run_child(self.entry, request, streams)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        for descriptor in streams:
            os.close(descriptor)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (connection, pidfd)
        self.selector.register(pidfd, selectors.EVENT_READ, ("child", pid))
        self.selector.register(connection, selectors.EVENT_READ, ("client", pid))
        with contextlib.suppress(OSError):  # a client gone already is seen as gone by serve()
            connection.sendall(_INTEGER.pack(pid))
        print(f"job {pid}: {request['argv'][0] if request['argv'] else '(no command)'}", file=sys.stderr, flush=True)

    def _close_in_child(self, connection: socket.socket) -> None:
        """The server's descriptors are not the job's: a child keeps none of them open."""
        self.selector.close()
        self.listener.close()
        connection.close()
        for other, pidfd in self.children.values():
            other.close()
            os.close(pidfd)

    def _client_gone(self, pid: int) -> None:
        """The job's client was killed (Snakemake stopping the job): so is the job."""
        self.selector.unregister(self.children[pid][0])
        os.kill(pid, signal.SIGKILL)

    def _finish(self, pid: int) -> None:
        connection, pidfd = self.children.pop(pid)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        with contextlib.suppress(OSError):
            connection.sendall(_INTEGER.pack(128 - status if status < 0 else status))
        self.selector.unregister(pidfd)
        with contextlib.suppress(KeyError):  # unregistered already when its client went first
            self.selector.unregister(connection)
        connection.close()
        os.close(pidfd)

    def _watched_process_gone(self) -> bool:
        try:
            os.kill(self.watched_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False

    def serve(self) -> None:
        while self.children or not self.stopping:
            for key, _ in self.selector.select(timeout=1.0):
                role, pid = key.data
                if role == "listener":
                    if not self.stopping:
                        self._accept()
                elif role == "child":
                    self._finish(pid)
                elif pid in self.children and not _peek(key.fileobj):
                    self._client_gone(pid)
            self.stopping = self.stopping or self._watched_process_gone()
            if self.stopping and self.listener.fileno() >= 0:
                self.selector.unregister(self.listener)
                self.listener.close()
        Path(self.path).unlink(missing_ok=True)
        if Path(self.path).parent.name.startswith(SOCKET_FOLDER_PREFIX):
            with contextlib.suppress(OSError):
                Path(self.path).parent.rmdir()


def serve_command(argv: list[str] | None = None) -> int:
    import argparse
    import importlib
    import time

    parser = argparse.ArgumentParser(prog="python -m imagenet_cog.warm_start", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True, help="the Unix socket to listen on")
    parser.add_argument("--watch", type=int, required=True, help="stop once this process (Snakemake) is gone")
    parser.add_argument("--preload", nargs="*", default=[], help="modules imported once")
    parser.add_argument("--entry", default=JOB_ENTRY, help="module:function each child runs with its arguments")
    arguments = parser.parse_args(argv)
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError) as error:
        print(f"warm start: not available here ({error}); jobs start cold", file=sys.stderr)
        return 0
    server = Server(arguments.socket, arguments.watch, arguments.entry)
    signal.signal(signal.SIGTERM, lambda number, frame: setattr(server, "stopping", True))
    started = time.perf_counter()
    # listening already: jobs that connect now wait for the imports instead of paying them too
    try:
        for module in arguments.preload:
            importlib.import_module(module)
    except ImportError as error:  # another interpreter than the jobs': they start cold
        print(f"warm start: {error} in {sys.executable}; jobs start cold", file=sys.stderr)
        Path(arguments.socket).unlink()
        return 0
    print(f"warm start: {' '.join(arguments.preload)} imported in "
          f"{time.perf_counter() - started:.1f} s; serving {arguments.socket}", file=sys.stderr, flush=True)
    import gc

    leave_the_imports_exit_work_undone()
    compile_package()
    # what was imported stays out of the collector's reach in every fork: a job's collections
    # neither walk those objects nor write to them (which would copy their pages)
    gc.freeze()
    server.serve()
    return 0


def leave_the_imports_exit_work_undone() -> None:
    """What the preloaded libraries set to run at exit tears down state of theirs that ends with
    the process anyway (torch's ~200 operator libraries' finalizers, dynamo's compile-time
    report): run in every job's exit it took ~80 ms, as long as the job's own work in a short
    one. A job's own exit handlers and finalizers, and the stdlib's (logging's flush,
    multiprocessing's workers), still run at its end."""
    import atexit
    import gc
    import weakref

    for thing in gc.get_objects():
        # the type, not isinstance: that asks a deprecated alias (torch.distributed.reduce_op)
        # for its __class__, which warns
        if issubclass(type(thing), weakref.finalize):
            thing.atexit = False
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is not None:
        atexit.unregister(dynamo_utils.dump_compile_times)


if __name__ == "__main__":
    raise SystemExit(serve_command())
