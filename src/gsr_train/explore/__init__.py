"""``gsr-train explore``: a run's questions one by one in the browser (one self-contained HTML page)."""
