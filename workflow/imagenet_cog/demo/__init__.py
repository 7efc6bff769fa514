"""The built-in demo (``workflow/rules/demo.smk``): every ``demo-*`` command.

The demo replaces ImageNet's images, and nothing else, so every other stage runs the code
it runs on real data.

- :mod:`.world`: generated images for a few real concepts of each level and IN-1K
  (``demo-world``), and for the level sets' pool (``demo-pool``).
- :mod:`.pretraining`: the demo's small network pretrained on the demo's IN-1K images
  (``pretrain-demo``), a checkpoint like any other.
- :mod:`.blurred`: a blurred copy of the demo's IN-1K standing in for IN-1K-blurred
  (``demo-blurred``).
- :mod:`.word_vectors`: random word vectors for the word2vec level set (``demo-embeddings``).
"""
