"""Levels stage (``workflow/rules/levels.smk``; paper Sec. 3.2-3.3, supp. A, D.1).

WordNet 3.0 -> the concept lists and image counts -> the eligible unseen concepts -> their
ranking by Lin similarity to IN-1K -> Lin's levels l1..lN; and the other level sets.

- :mod:`.wordnet`: WordNet 3.0 as a copy NLTK reads, and its noun graph.
- :mod:`.concepts`: the concept catalogue (IN-21K and IN-1K wnids, names, glosses) and the
  image counts.
- :mod:`.similarity`: Lin's similarity and the other WordNet measures, to the nearest IN-1K
  concept.
- :mod:`.cut`: the eligibility filters, the ranking and the cut into levels (``cut-levels``).
- :mod:`.figure`: similarity along the ranking, levels shaded (paper Fig. 2).
- :mod:`.level_sets`: the other level sets (WordNet measures, word2vec, random draws) and
  the pool of eligible concepts outside Lin's levels.
- :mod:`.word_vectors`: word2vec similarity of concepts to IN-1K (supp. D.1).
"""
