"""Features stage (``workflow/rules/features.smk``; paper Sec. 3.4.1, supp. B.1): frozen
features of every model, dataset and split, in HDF5.

- :mod:`.extract`: one shard's features from its images (``extract``), and the merge of a
  split's shards into one file (``merge-shards``).
- :mod:`.decoding`: JPEG decoding, resizing and cropping on the extraction device.
- :mod:`.store`: the HDF5 shard and merged-file formats, their readers and writers.
- :mod:`.views`: datasets as views over features already extracted (the level sets'
  datasets, ``level-set-view``; also the class-balanced variant's).
"""
