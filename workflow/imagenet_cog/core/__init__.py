"""What every stage shares, and nothing else: it imports no stage.

- :mod:`.io`: atomic writes (every output goes through :func:`.io.atomic_output`), TSV, JSON
  and line files.
- :mod:`.pickles`: the authors' published level and split pickles, read by an unpickler
  that builds only lists, dicts, strings, numbers and numpy arrays.
- :mod:`.layout`: every path under ``results/`` (:class:`.layout.Layout`) and the names of
  the tables and figures.
- :mod:`.naming`: dataset and probe-kind names (``l3``, ``wup-l3``, ``random-07``,
  ``balanced-l4``, ``pca-256``, ``in1k_blurred``, ``pool``): formed, parsed and matched here
  only, by the package and the rule files alike.
- :mod:`.image_layouts`: the ways an image root holds ImageNet, one entry each (the roots
  that may have it, how it is read).
- :mod:`.device`: the torch device a ``*.device`` setting asks for.
- :mod:`.sampling`: reproducible choices (generators seeded by names, evenly spaced picks).
- :mod:`.tables`: a table as CSV, Markdown and LaTeX, and the marks its cells carry.
- :mod:`.plots`: the figures' theme, model styles, panels, legend and saving.
"""
