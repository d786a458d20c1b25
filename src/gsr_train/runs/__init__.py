"""Experiment runners: one function per experiment kind, called by ``train.py`` via ``cfg.runner``."""
