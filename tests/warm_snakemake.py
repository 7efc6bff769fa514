"""`snakemake ARGUMENTS` run by a fork of the suite's Snakemake server (tests/conftest.py), or
by the snakemake script itself where the server refuses it or is not there:

    python tests/warm_snakemake.py SOCKET SNAKEMAKE ARGUMENTS...

Its exit status, output and signals are the Snakemake run's, as with the script."""

import os
import sys

from imagenet_cog.warm_start import run_warm

SNAKEMAKE_ENTRY = "snakemake.cli:main"

if __name__ == "__main__":
    socket_path, snakemake, *arguments = sys.argv[1:]
    status = run_warm(arguments, entry=SNAKEMAKE_ENTRY, socket_path=socket_path, program=snakemake)
    if status is None:
        os.execv(snakemake, [snakemake, *arguments])
    raise SystemExit(status)
