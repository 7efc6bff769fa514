"""Atomic writes (imagenet_cog.core.io): what a killed write left is removed by the next write
of the same file, and by nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import torch

from imagenet_cog.core.io import atomic_directory, atomic_output, partial_writes, write_text


def test_a_write_killed_mid_way_leaves_a_partial_file_the_next_write_removes(tmp_path):
    destination = tmp_path / "l1.checkpoint.pt"
    killed = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        from imagenet_cog.core.io import atomic_output
        with atomic_output({str(destination)!r}) as temporary:
            temporary.write_bytes(b"half a checkpoint")
            print("writing", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ})
    assert killed.stdout.readline() == "writing\n"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert len(partial_writes(destination)) == 1 and not destination.exists()
    other = tmp_path / "l2.checkpoint.pt"
    write_text(other, "another file's write")
    assert len(partial_writes(destination)) == 1  # not its own: kept

    with atomic_output(destination) as temporary:
        torch.save({"epoch": 1}, temporary)
    assert partial_writes(destination) == [] and torch.load(destination)["epoch"] == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["l1.checkpoint.pt", "l2.checkpoint.pt"]


def test_a_folder_a_killed_write_left_is_removed_by_the_next(tmp_path):
    destination = tmp_path / "nltk_data"
    leftover = tmp_path / ".nltk_data.x1y2.partial"
    (leftover / "corpora").mkdir(parents=True)
    with atomic_directory(destination) as staging:
        (staging / "done").write_text("yes")
    assert not leftover.exists() and (destination / "done").read_text() == "yes"
