"""The scores of unseen-concept detection and the columns of its per-seed table: what
``analyses-detection`` (:mod:`.detection`, which computes them with torch and scikit-learn)
and ``detection-results`` (:mod:`.detection_report`, which tabulates them) and the rule
files share, importable without either's libraries."""

PROBE_SCORES = ("msp", "max_logit", "energy")
NEIGHBOUR_SCORE = "knn_distance"
SCORES = (*PROBE_SCORES, NEIGHBOUR_SCORE, "mcm")
SCORE_TITLES = {"msp": "MSP", "max_logit": "max-logit", "energy": "energy", NEIGHBOUR_SCORE: "k-NN distance", "mcm": "MCM"}
SEED_COLUMNS = ["model", "score", "seed", "dataset", "auroc", "fpr95", "n_known", "n_unknown"]
