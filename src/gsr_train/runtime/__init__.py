"""The mechanics every run shares, below the runners: claiming and marking run folders, stop signals
and SLURM requeue, checkpoints and resume, building the Lightning trainer, device placement and
progress in the log. Runners in `gsr_train.runs` compose them; nothing here knows a method."""
