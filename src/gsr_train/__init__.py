"""gsr-train: a PyTorch Lightning + Hydra framework for knowledge-graph retrieval-augmented generation."""

from gsr_train.numerics import pin_cpu_numerics

pin_cpu_numerics()  # before torch computes anything: its libraries read these settings on first use
