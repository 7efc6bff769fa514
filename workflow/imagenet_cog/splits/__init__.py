"""Splits stage (``workflow/rules/splits.smk``; paper supp. A): which images each dataset
trains and tests on.

- :mod:`.image_splits`: the split table of one dataset from its image root (or the
  authors' split pickle) (``image-splits``).
- :mod:`.summary`: concepts and images of every split table (``split-summary``).
"""
