"""Variants stage (``workflow/rules/variants.smk``): the paper's checks of its own setup.

- :mod:`.balanced`: the class-balanced variant (supp. A.4): its splits, feature views and
  comparison table.
- :mod:`.blurred`: IN-1K-blurred against IN-1K (supp. E).
- :mod:`.audit`: the label-noise audit (supp. A.3): one dataset's classifier on another's
  test images.
"""
