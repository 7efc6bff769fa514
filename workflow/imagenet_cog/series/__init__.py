"""Series stage (``workflow/rules/series.smk``): a training run's checkpoints as one series,
each evaluated as a model of its own (``models.series``), read back in the order of training.

- :mod:`.effective_rank`: RankMe, the effective rank of a checkpoint's IN-1K training
  features (``effective-rank``), a label-free screen per checkpoint.
- :mod:`.table`: the series' long table from the checkpoints' probe results.
- :mod:`.summary`: per series, probe kind, N and level: the best step, the final checkpoint
  against it, the gap to IN-1K, the per-concept curve's slope and RankMe at each step.
- :mod:`.figure`: top-1 per level against step, and relative to IN-1K.
- :mod:`.results`: the command that writes them (``series-results``).
"""
