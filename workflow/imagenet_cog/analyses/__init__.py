"""Analyses stage (``workflow/rules/analyses.smk``): representation analyses of the frozen features.

Each per-(model, dataset) analysis reads the feature files the features stage wrote and
writes one JSON ``Layout.analysis_result(model, dataset, analysis)`` holding a list
``metrics`` of ``{"metric", "value", "low", "high", "spread"}`` records plus its settings
and provenance; :mod:`.report` gathers every such JSON into one tidy summary CSV.

- :mod:`.clustering`: k-means on the training features, metrics of the test assignments
  (CoG preprint, Sec. 3.4, 4.3.1, supp. D.1; Laina et al. 2020 Sec. 5.1).
- :mod:`.geometry`: alignment and uniformity of the test features (CoG preprint, Sec. 4.3.2, supp. D.2).
- :mod:`.learnability`: forced-choice tasks answered in feature space (Laina et al. 2020, Eq. 1-2).
- :mod:`.agreement`: adjusted NMI between models' clusterings (Laina et al. 2020, Sec. 5.1).
- :mod:`.raters`: forced-choice HTML sheets for human raters and their scorer (Laina et al. 2020, Sec. 3).
- :mod:`.descriptions`: a concept's descriptions, the WordNet gloss or an automatic one (a captioner's TSV).
- :mod:`.describability`: the sheets' describability tasks answered by an image-text model (Eq. 3);
  :mod:`.describability_table` the table per level, gloss vs automatic description (Tab. 2).
- :mod:`.detection`: detecting unseen concepts, IN-1K's test images against each level's (MSP,
  max-logit, energy, k-NN distance, MCM; AUROC, FPR@95); :mod:`.detection_report` its tables and figures.
- :mod:`.report`: the summary, tables and figures of the analyses.
- :mod:`.common`: reading a split's features, metric records and provenance.
"""
