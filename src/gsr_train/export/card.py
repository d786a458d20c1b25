"""Model cards (``README.md`` with YAML metadata) for exported folders, from a run's figures.

A card states what the model is, the data it was trained / evaluated on, the configuration,
the metrics of the run and how to load the folder. It is built only from the export info
(never from the environment), and every value of a secret-looking environment variable
(``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``) is redacted before it is written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

HUB_DATASETS = {"webqsp": "rmanluo/RoG-webqsp", "cwq": "rmanluo/RoG-cwq"}
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|(^|_)KEY($|_)|API_KEY", re.I)

LOAD = {
    "subgraphrag": """```python
from gsr_train.export import SubgraphRAGScorer
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever

scorer = SubgraphRAGScorer.from_pretrained("{where}")   # a TripleScorer (eval mode)
retriever = SubgraphRAGRetriever(scorer)
# scores = retriever.score_split(index[split], emb.question[split], emb)  # same encoder: {encoder}
```""",
    "gsr": """```python
from gsr_train.models.gsr.modeling import GSRModel

gsr = GSRModel.from_pretrained("{where}")   # model + tokenizer with one token per KG relation
# or the plain transformers model: {auto_class}.from_pretrained("{where}")
```
Chains are decoded with `gsr_train.models.gsr.decoding.beam_chains(gsr, questions)` and executed
from the topic entity (`gsr_train.retrievers.gsr.GSRRetriever`).""",
    "reader": """```python
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer

model = AutoPeftModelForCausalLM.from_pretrained("{where}")   # base model: {base}
tokenizer = AutoTokenizer.from_pretrained("{where}")
```""",
}

DESCRIBE = {
    "subgraphrag": "SubgraphRAG triple scorer: an MLP that scores every triple of a question's subgraph from "
    "frozen text embeddings of the question, head, relation and tail plus directional distance "
    "encoding (DDE). The top-K triples go to a reader.",
    "gsr": "GSR generative subgraph retriever: a seq2seq model whose vocabulary has one token per KG relation; "
    "it generates relation chains that are executed from the topic entity to fetch a subgraph.",
    "reader": "KG-RAG reader: a causal LM fine-tuned with (Q)LoRA to answer questions from retrieved "
    "knowledge-graph evidence; this folder is the peft adapter.",
}


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret (at least 6 characters long)."""
    env = os.environ if env is None else env
    return sorted({v for k, v in env.items() if SECRET_NAME.search(k) and v and len(v) >= 6}, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, "<redacted>")
    return text


def _metrics_table(metrics: Mapping[str, Any]) -> str:
    if not metrics:
        return "_no metrics recorded_"
    lines = ["| metric | value |", "|---|---:|"]
    for k, v in metrics.items():
        if isinstance(v, float) and not (v.is_integer() and abs(v) >= 2):
            lines.append(f"| {k} | {v:.4f} |")
        else:  # counts
            lines.append(f"| {k} | {int(v) if isinstance(v, float) else v} |")
    return "\n".join(lines)


def build_card(info: Mapping[str, Any], where: str = "path/or/org-name") -> ModelCard:
    """``info``: kind, name, data, config (dict), metrics (flat dict), files, source, extras
    (encoder, base_model, ...). ``where``: what the loading snippet passes to from_pretrained."""
    kind = info["kind"]
    data = str(info.get("data") or "unknown")
    datasets = [HUB_DATASETS[data]] if data in HUB_DATASETS else None
    base = info.get("base_model")
    card_data = ModelCardData(
        library_name="peft" if kind == "reader" else "gsr-train",
        tags=["knowledge-graph", "kgqa", "retrieval-augmented-generation", kind],
        datasets=datasets,
        base_model=base if isinstance(base, str) and "/" in base and not os.path.isabs(base) else None,
        license=info.get("license"),
    )
    config = json.dumps(info.get("config") or {}, indent=2, sort_keys=True, default=str)
    files = "\n".join(f"- `{f}`" for f in info.get("files", []))
    load = LOAD[kind].format(
        where=where,
        encoder=info.get("encoder", "see config"),
        base=base or "see adapter_config.json",
        auto_class=info.get("auto_class", "transformers.AutoModelForSeq2SeqLM"),
    )
    body = f"""
# {info.get("name") or kind}

{DESCRIBE[kind]}

Trained with gsr-train (PyTorch Lightning + Hydra); the loading code below needs the `gsr_train` package.

## Data

- dataset: `{data}`{f" (Hugging Face: `{datasets[0]}`)" if datasets else ""}
- evaluation split: `{info.get("split", "test")}`
{info.get("data_note", "")}

## Metrics

{info.get("metrics_note", "Figures of the training run on the evaluation split.")}

{_metrics_table(info.get("metrics") or {})}

## How to load

{load}

## Configuration

```json
{config}
```

## Files

{files}

## Provenance

- source: `{info.get("source", "")}`
- exported by: `gsr-train export`
"""
    return ModelCard(redact(f"---\n{card_data.to_yaml()}\n---\n{body}"))
