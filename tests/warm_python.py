"""`python ARGUMENTS` (a script and its arguments, ``-c CODE`` or ``-m MODULE``) run by a fork of a
server that has imported torch (tests/test_gpu_suite.py runs benchmarks/gpu_suite.sh's dozen
benchmark processes so, tests/test_docs_commands.py the documented commands' --help), or by the
interpreter itself where the server refuses it or is not there:

    python tests/warm_python.py SOCKET ARGUMENTS...

Its exit status, output and signals are the script's, as with the interpreter."""

import os
import runpy
import subprocess
import sys

from imagenet_cog.warm_start import launch_server, run_warm

PYTHON_ENTRY = "warm_python:run_as_interpreter"


def launch(log: str, preload: list[str], environment: dict) -> tuple[subprocess.Popen, list[str]]:
    """A server that has imported ``preload``, started with ``environment`` (which must put this
    folder on PYTHONPATH), and the command line that runs `python ARGUMENTS` in a fork of it."""
    server, socket_path = launch_server(sys.executable, log, preload, entry=PYTHON_ENTRY, environ=environment)
    return server, [sys.executable, os.path.abspath(__file__), socket_path]


def run_as_interpreter(argv: list[str]) -> int:
    """In the server's child: what ``python *argv`` runs, with the interpreter's sys.argv and
    sys.path[0] (the script's folder, '' for code given with -c, the working folder for -m)."""
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path.insert(0, "")
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    socket_path, *arguments = sys.argv[1:]
    status = run_warm(arguments, entry=PYTHON_ENTRY, socket_path=socket_path, program=sys.executable)
    if status is None:
        os.execv(sys.executable, [sys.executable, *arguments])
    raise SystemExit(status)
