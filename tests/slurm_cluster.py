"""A throwaway single-node SLURM cluster for the cluster test.

Starts munged, slurmctld and slurmd as root with every file (keys, sockets, state, logs,
slurm.conf, gres.conf) in one temporary folder, and fake GPUs (gres ``File=`` an empty file each)
so that the workflow's GPU rules are scheduled on machines without one. No accounting
daemon runs, which is why the profile queries job states with squeue.

The executor plugin's job step clears every ``SLURM_*`` variable, SLURM_CONF included, so
jobs find the configuration only at ``/etc/slurm/slurm.conf``: the cluster links it there
for its lifetime and puts back whatever was there before.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPOSITORY / "scripts" / "install-system-deps.sh"
SYSTEM_CONFIG = Path("/etc/slurm/slurm.conf")
DAEMONS = ("munged", "slurmctld", "slurmd")


class ClusterError(RuntimeError):
    """The local cluster could not be installed, started or stopped."""


def ensure_slurm_installed() -> None:
    """Install Debian's SLURM and munge packages through the project's script if missing.

    Raises :class:`ClusterError` naming what is missing when that is not possible, so the
    test fails with the reason instead of being skipped.
    """
    missing = [name for name in (*DAEMONS, "sbatch", "squeue", "sinfo") if not _which(name)]
    if not missing:
        return
    if os.geteuid() != 0:
        raise ClusterError(
            f"the SLURM test needs {', '.join(missing)} and root to start a local cluster; "
            f"run it as root (CI does), or install them first: sudo bash {INSTALL_SCRIPT}"
        )
    result = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=600)
    still_missing = [name for name in missing if not _which(name)]
    if result.returncode != 0 or still_missing:
        raise ClusterError(
            f"{INSTALL_SCRIPT} did not install {', '.join(still_missing) or 'SLURM'} "
            f"(exit {result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        )


def _which(name: str) -> str | None:
    # The daemons live in /usr/sbin, which a non-login root shell may lack on PATH.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _memory_mb() -> int:
    with open("/proc/meminfo") as stream:
        for line in stream:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise ClusterError("/proc/meminfo has no MemTotal line")


class LocalSlurmCluster:
    """``with LocalSlurmCluster(folder) as cluster:`` runs a one-node cluster inside the block.

    The node offers every CPU, all memory but 2 GB and ``gpus`` fake GPUs, in one default
    partition named ``partition``.
    """

    def __init__(self, folder: Path, gpus: int = 1, partition: str = "debug", start_timeout: float = 60):
        self.folder = Path(folder).resolve()
        self.gpus = gpus
        self.partition = partition
        self.start_timeout = start_timeout
        self.host = socket.gethostname().split(".")[0]
        self._moved_system_config: Path | None = None
        self._linked = False

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "LocalSlurmCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        ensure_slurm_installed()
        if os.geteuid() != 0:
            raise ClusterError("starting slurmctld and slurmd needs root; run the SLURM test as root")
        for sub in ("munge", "state", "spool", "log", "run"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses a socket folder that others cannot traverse.
        os.chmod(self.folder, 0o755)
        os.chmod(self.folder / "munge", 0o755)
        self._write_munge_key()
        self._write_config()
        self._link_system_config()
        self._start_munge()
        self._run_daemon("slurmctld", ["-f", str(self.config)])
        self._run_daemon("slurmd", ["-f", str(self.config)])
        self._wait_until_idle()

    def stop(self) -> None:
        """Stop the daemons this cluster started (by their pid files) and unlink the config."""
        errors = []
        for daemon in reversed(DAEMONS):
            pid_file = self.folder / "run" / f"{daemon}.pid"
            try:
                pid = int(pid_file.read_text().strip())
            except (FileNotFoundError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            if not _wait_for_exit(pid, 15):
                os.kill(pid, signal.SIGKILL)
                if not _wait_for_exit(pid, 5):
                    errors.append(f"{daemon} (pid {pid}) did not stop")
        self._restore_system_config()
        if errors:
            raise ClusterError("; ".join(errors))

    # ------------------------------------------------------------------ queries
    @property
    def config(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def environment(self) -> dict[str, str]:
        """The environment client commands (sbatch, squeue, snakemake) should run in."""
        path = os.environ.get("PATH", "")
        return {**os.environ, "SLURM_CONF": str(self.config), "PATH": f"{path}:/usr/sbin:/sbin"}

    def logs(self) -> str:
        """The daemons' logs, for failure messages."""
        parts = []
        for log in sorted((self.folder / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def node_state(self) -> str:
        result = subprocess.run(
            [_which("sinfo") or "sinfo", "-h", "-N", "-o", "%t"],
            capture_output=True, text=True, env=self.environment, timeout=10,
        )
        return result.stdout.strip()

    # ------------------------------------------------------------------ internals
    def _write_munge_key(self) -> None:
        key = self.folder / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)

    def _write_config(self) -> None:
        d = self.folder
        memory = max(1000, _memory_mb() - 2048)
        lines = [
            "ClusterName=cogtest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={d}/munge/munge.socket.2",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool",
            f"SlurmctldPidFile={d}/run/slurmctld.pid",
            f"SlurmdPidFile={d}/run/slurmd.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/affinity",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            # Without a default, a job that asks no memory takes the whole node.
            "DefMemPerCPU=1000",
            "GresTypes=gpu",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} "
            f"RealMemory={memory} Gres=gpu:{self.gpus} State=UNKNOWN",
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        self.config.write_text("\n".join(lines) + "\n")
        # slurmd refuses two GPUs of one device file: each fake GPU is an empty file of its own
        (d / "gpus").mkdir(exist_ok=True)
        devices = [d / "gpus" / f"gpu{index}" for index in range(self.gpus)]
        for device in devices:
            device.touch()
        (d / "gres.conf").write_text(
            "AutoDetect=off\n" + "".join(f"NodeName={self.host} Name=gpu File={device}\n" for device in devices)
        )

    def _link_system_config(self) -> None:
        SYSTEM_CONFIG.parent.mkdir(parents=True, exist_ok=True)
        if SYSTEM_CONFIG.is_symlink() or SYSTEM_CONFIG.exists():
            backup = SYSTEM_CONFIG.with_name(f"slurm.conf.before-cogtest-{os.getpid()}")
            os.replace(SYSTEM_CONFIG, backup)
            self._moved_system_config = backup
        SYSTEM_CONFIG.symlink_to(self.config)
        self._linked = True

    def _restore_system_config(self) -> None:
        if self._linked and SYSTEM_CONFIG.is_symlink() and Path(os.readlink(SYSTEM_CONFIG)) == self.config:
            SYSTEM_CONFIG.unlink()
        self._linked = False
        if self._moved_system_config is not None:
            os.replace(self._moved_system_config, SYSTEM_CONFIG)
            self._moved_system_config = None

    def _start_munge(self) -> None:
        m = self.folder / "munge"
        self._run_daemon(
            "munged",
            [
                f"--key-file={m / 'munge.key'}",
                f"--socket={m / 'munge.socket.2'}",
                f"--pid-file={self.folder / 'run' / 'munged.pid'}",
                f"--log-file={self.folder / 'log' / 'munged.log'}",
                f"--seed-file={m / 'munge.seed'}",
                "--force",
            ],
        )

    def _run_daemon(self, daemon: str, arguments: list[str]) -> None:
        executable = _which(daemon)
        # Each daemon forks into the background and writes its pid file; a failure to
        # start shows as a non-zero exit here or as a missing pid file.
        result = subprocess.run(
            [executable, *arguments], capture_output=True, text=True, env=self.environment, timeout=30
        )
        pid_file = self.folder / "run" / f"{daemon}.pid"
        deadline = time.monotonic() + 10
        while result.returncode == 0 and not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if result.returncode != 0 or not pid_file.exists():
            raise ClusterError(
                f"{daemon} did not start (exit {result.returncode}): {result.stderr.strip()}\n{self.logs()}"
            )

    def _wait_until_idle(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state()
            if state in ("idle", "mix"):
                return
            time.sleep(0.5)
        raise ClusterError(f"node not idle after {self.start_timeout} s (state '{state}'):\n{self.logs()}")


def _wait_for_exit(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
