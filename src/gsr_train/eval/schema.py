"""The names a run folder's figures go by, and how their intervals are drawn: torch-free, so that
the verbs reading run folders (``compare``, ``gsr-table``, ``explore``) print their help at once.
`gsr_train.eval.tail` and `gsr_train.eval.intervals` re-export them."""

SCHEMA = "gsr-train/metrics/1"
METRICS_FILE = "metrics.json"
QUESTIONS_FILE = "questions.jsonl"  # the per-question values behind each row's intervals
INTERVALS = "intervals"  # a row's {metric: [low, high]}

RESAMPLES = 2000  # bootstrap resamples (and permutations) per figure
SEED = 0
LEVEL = 0.95

COMPARE_KS = (10, 20, 50, 100)  # the Ks retrieval papers compare methods at
RECALL_KS = (10, 20, 50, 100, 200)  # the recall cut-offs of the papers' tables (every recall command's default)
