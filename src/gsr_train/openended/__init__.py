"""OKGQA's open-ended evaluation: long-form answers judged against the KG (FActScore, G-Eval),
across retrieval forms and OKGQA-P perturbations. Runners live in `gsr_train.runs.open_ended`."""
