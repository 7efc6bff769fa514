"""What the workflow reads or sets of Snakemake's own objects beyond its documented API, in one
place; tests/test_library_insides.py fails, naming the attribute, when a release moves any of it.

* ``LISTING_OPTIONS``: the destinations of Snakemake's command-line options that only list or
  draw the workflow (the Snakefile's checks stay quiet for them);
* ``drop_the_default_job_rate_limit``: a local run's scheduler without the default job rate
  limit. No setting removes it: any ``--max-jobs-per-timespan`` keeps a limiter, and with it
  every scheduling round while jobs wait for cores schedules another one a timespan later (a
  timer thread). Four jobs of 1.5 s on one core: 5 rounds cut, 13 at the default, 13 at
  10000/1s; 5 at 10000/10s, but the process then waits for its timers after the last job
  (20 s against 7); 10000/100ms reads as 100 minutes, and the process waited on.

Standard library only: the Snakefile imports it while it is read.
"""

from __future__ import annotations

LISTING_OPTIONS = ("list_rules", "list_target_rules", "lint", "rulegraph", "dag", "filegraph", "summary",
                   "detailed_summary")
# Snakemake's default job rate limit (--max-jobs-per-timespan 100/1s): (jobs, seconds)
DEFAULT_JOB_RATE = (100, 1)


def drop_the_default_job_rate_limit(scheduler) -> bool:
    """Removes the default job rate limit from Snakemake's job scheduler (its
    ``job_rate_limiter``); a limit set otherwise stays. Whether it was removed: a release
    without that attribute keeps its limit, and the run is only slower."""
    limiter = getattr(scheduler, "job_rate_limiter", None)
    if limiter is None or (limiter.max_jobs, limiter.timespan) != DEFAULT_JOB_RATE:
        return False
    scheduler.job_rate_limiter = None
    return True
