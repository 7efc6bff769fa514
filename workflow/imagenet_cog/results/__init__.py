"""Results stage (``workflow/rules/results.smk``; paper Sec. 4.2, supp. Tables 5-10).

- :mod:`.summary`: probe results -> the tidy summary and per-seed results
  (``aggregate-probes``), and their readers.
- :mod:`.tables`: the paper's tables (``results-tables``) and the statistics tables
  (``results-statistics``).
- :mod:`.statistics`: intervals, paired tests, rank agreement, the generalization drop.
- :mod:`.figures`: the paper's result figures (``results-figures``).
- :mod:`.drop`: the drop from IN-1K to each level (``results-drop``).
- :mod:`.published`: ours against the paper's published top-1 (``results-published``);
  :mod:`.paper`: the paper's model names.
- :mod:`.level_set_results`: top-1 per level of every level set (``level-sets-results``).
- :mod:`.timings`: seconds per model and dataset (``results-timings``).
"""
