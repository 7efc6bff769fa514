import sys

from imagenet_cog.warm_start import run_warm

# On a local run the job is a child of the run's warm-start server, which has torch imported;
# without one (or one that does not match this interpreter) it runs here, cold.
status = run_warm(sys.argv[1:])
if status is None:
    from imagenet_cog.cli import run

    status = run()
raise SystemExit(status)
