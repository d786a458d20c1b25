"""OKGQA-P robustness: KG perturbations, KG similarity (SC2D / SD2 / ATS), and the command that
re-runs trained and classic retrievers on perturbed test graphs (``gsr-train robustness``)."""
