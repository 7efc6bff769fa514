"""Plan stage: what a run costs before it starts (jobs, images, bytes, trial-epochs,
GPU-hours on a named device), from one cost model shared with benchmarks/protocol_cost.py
and rate files with their provenance (resources/rates/)."""
