"""Write the API reference: docs/reference/api/<group>.md, one page per subpackage of ``gsr_train``
(``core.md`` for the top-level modules), each with one mkdocstrings block (``::: gsr_train.x.y``) per
public module (a module is public unless its name or a parent package's starts with ``_``); the
page list of docs/reference/api.md and the API section of mkdocs.yml's nav, between their markers.
The package is walked on disk and its docstrings read with ``ast``: nothing is imported (mkdocstrings
reads the source through griffe). tests/test_api_reference.py fails while a page is stale.

    python tools/write_api_reference.py            # write what changed
    python tools/write_api_reference.py --check    # exit 1, naming the stale files, if any
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "gsr_train"
PAGES = REPO / "docs" / "reference" / "api"
ENTRY = REPO / "docs" / "reference" / "api.md"
MKDOCS = REPO / "mkdocs.yml"
CORE = "core"

# The entry page's list and the nav's API entries lie between these lines (kept, written by hand once).
ENTRY_BEGIN, ENTRY_END = "<!-- api pages: tools/write_api_reference.py -->", "<!-- end api pages -->"
NAV_BEGIN, NAV_END = "# api pages: tools/write_api_reference.py", "# end api pages"

# A package whose __init__ has no docstring is introduced by this line.
INTROS = {
    CORE: "The top-level modules of gsr_train: the command line, configuration, files, arrays, "
    "plugins and the small mechanics the packages share.",
    "data": "Dataset rows and files: Arrow row batches, the RoG corpus, open questions and the synthetic KG "
    "and questions.",
    "eval": "Metrics and their reports: retrieval metrics, QA scores, intervals, run comparisons, "
    "scoreboards and the per-question tails of a run.",
    "kg": "The knowledge graph: the per-question KG index, the whole-KG store, subgraph extraction, "
    "shortest-path supervision, entity linking and SPARQL endpoints.",
    "models": "The trainable models: the edge-scorer interface, SubgraphRAG's triple scorer, GSR and GNN-RAG.",
    "retrievers": "Retrievers: the plugin interface, the registry, and the built-in retrievers (cosine, "
    "classic, SubgraphRAG, GSR, GNN-RAG, PPR, PCST, SimGRAG, SAFE).",
    "text": "Text encoders, embeddings and their caches, and the vector index.",
}


def is_public(dotted: str) -> bool:
    return not any(part.startswith("_") for part in dotted.split("."))


def modules() -> list[str]:
    """Every public module of the package (packages included), dotted, sorted."""
    found = []
    for path in (SRC / PACKAGE).rglob("*.py"):
        folders = path.relative_to(SRC).parent.parts
        if not all((SRC / Path(*folders[: i + 1]) / "__init__.py").is_file() for i in range(len(folders))):
            continue  # not in a package (__pycache__, data or asset folders)
        parts = path.relative_to(SRC).with_suffix("").parts
        dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if is_public(dotted):
            found.append(dotted)
    return sorted(found)


def group(module: str) -> str:
    """The page of ``module``: its top-level subpackage, or ``core`` for the top-level modules."""
    parts = module.split(".")
    if len(parts) >= 2 and (SRC / PACKAGE / parts[1] / "__init__.py").is_file():
        return parts[1]
    return CORE


def groups() -> dict[str, list[str]]:
    pages: dict[str, list[str]] = {}
    for module in modules():
        pages.setdefault(group(module), []).append(module)
    return dict(sorted(pages.items(), key=lambda kv: (kv[0] != CORE, kv[0])))


def _source(module: str) -> Path:
    path = SRC / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def intro(name: str) -> str:
    """The page's first line: the package docstring's first paragraph, or its line in INTROS."""
    if name != CORE:
        doc = ast.get_docstring(ast.parse(_source(f"{PACKAGE}.{name}").read_text(encoding="utf-8")))
        if doc:
            return " ".join(doc.split("\n\n", 1)[0].split())
    return INTROS.get(name, f"The modules of `{PACKAGE}.{name}`.")


def title(name: str) -> str:
    return f"{PACKAGE} (top-level modules)" if name == CORE else f"{PACKAGE}.{name}"


def page(name: str, members: list[str]) -> str:
    lines = [
        f"# API: {title(name)}",
        "",
        "<!-- Written by tools/write_api_reference.py: edit the docstrings, then run it. -->",
        "",
        intro(name),
        "",
        f"One section per module ({len(members)}), from its docstrings; the plugin interfaces and the "
        "main entry points are introduced in [Plugin interfaces (API)](../api.md).",
        "",
    ]
    for module in members:
        lines += [f"::: {module}", "    options:", "      heading_level: 2", "      show_submodules: false", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _between(text: str, begin: str, end: str, body: list[str], where: Path) -> str:
    """``text`` with the lines between the ``begin`` and ``end`` marker lines replaced by ``body``
    (indented as the ``begin`` line is)."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SystemExit(f"{where}: expected one {begin!r} line and one {end!r} line after it")
    indent = lines[starts[0]][: len(lines[starts[0]]) - len(lines[starts[0]].lstrip())]
    return "\n".join([*lines[: starts[0] + 1], *(indent + b if b else b for b in body), *lines[ends[0] :]])


def entry_list(pages: dict[str, list[str]]) -> list[str]:
    return [f"- [{title(name)}](api/{name}.md): {len(mods)} modules" for name, mods in pages.items()]


def nav_list(pages: dict[str, list[str]]) -> list[str]:
    return [f'- "{title(name)}": reference/api/{name}.md' for name in pages]


def expected() -> dict[Path, str]:
    """Every file this tool writes, with the text it should have."""
    pages = groups()
    files = {PAGES / f"{name}.md": page(name, mods) for name, mods in pages.items()}
    files[ENTRY] = _between(ENTRY.read_text(encoding="utf-8"), ENTRY_BEGIN, ENTRY_END, entry_list(pages), ENTRY)
    files[MKDOCS] = _between(MKDOCS.read_text(encoding="utf-8"), NAV_BEGIN, NAV_END, nav_list(pages), MKDOCS)
    return files


def stale() -> list[Path]:
    """The files that differ from what this tool writes, and the pages it no longer writes."""
    files = expected()
    wrong = [p for p, text in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    return wrong + sorted(set(PAGES.glob("*.md")) - set(files))


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    wrong = stale()
    if argv == ["--check"]:
        for path in wrong:
            print(f"stale: {path.relative_to(REPO)} (run python tools/write_api_reference.py)", file=sys.stderr)
        return 1 if wrong else 0
    files = expected()
    PAGES.mkdir(parents=True, exist_ok=True)
    for path in wrong:
        if path in files:
            path.write_text(files[path], encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
        else:
            path.unlink()
            print(f"removed {path.relative_to(REPO)}")
    if not wrong:
        print("the API reference is current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
