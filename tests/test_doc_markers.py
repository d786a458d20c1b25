"""Every command the README and the docs show is run, or composed, by a test that reads it from the page;
the README's links resolve (mkdocs --strict checks those of docs/).

Each ```bash block of README.md and docs/**/*.md has on the line before it a marker naming that test:
``<!-- ran by: tests/test_x.py::test_name -->`` (the test runs the block's commands as written, in a
checkout) or ``<!-- composed by: tests/test_x.py::test_name -->`` (the test composes each ``python
train.py`` line as written and checks its options, without running it: it needs a GPU, the Hub, an LLM
or hours). Checked here without running anything: the test file exists, defines that function, and
reads the page (its source names the page's path). A block that is only an illustration is
```console or ```text, and the page says that the tests do not run it; so is a shell fence of any
other name refused here (```sh, ```shell).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .doc_blocks import FENCE, REPO

MARKER = re.compile(r"^<!-- (ran|composed) by: (tests/[\w/]+\.py)::(\w+) -->$")
PAGES = sorted(
    str(p.relative_to(REPO)) for p in [REPO / "README.md", *(REPO / "docs").rglob("*.md")] if "results" not in p.parts
)


def _fenced(page: str) -> list[tuple[str, str, int]]:
    """(language, the line before the fence, line number) of every fenced block of ``page``."""
    text = (REPO / page).read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        found.append((match.group(1), before.strip(), text.count("\n", 0, match.start()) + 1))
    return found


def test_the_pages_are_found():
    assert "README.md" in PAGES and "docs/getting-started.md" in PAGES and len(PAGES) > 20


@pytest.mark.parametrize("page", PAGES)
def test_every_bash_block_names_a_test_that_reads_its_page(page):
    problems = []
    for lang, before, line in _fenced(page):
        if lang in ("sh", "shell", "zsh"):
            problems.append(f"{page}:{line}: a ```{lang} block: ```bash with a marker, or ```console")
        if lang != "bash":
            continue
        marker = MARKER.match(before)
        if not marker:
            problems.append(f"{page}:{line}: no '<!-- ran by: tests/FILE.py::TEST -->' on the line before")
            continue
        path, name = REPO / marker.group(2), marker.group(3)
        if not path.is_file():
            problems.append(f"{page}:{line}: {marker.group(2)} does not exist")
            continue
        source = path.read_text()
        if not re.search(rf"^(async )?def {name}\(", source, re.M):
            problems.append(f"{page}:{line}: {marker.group(2)} has no test {name}")
        if page not in source:
            problems.append(f"{page}:{line}: {marker.group(2)} never names {page}, so it does not read it")
    assert not problems, "\n".join(problems)


def test_a_marker_with_a_wrong_name_is_caught(tmp_path, monkeypatch):
    """The check itself: a page whose marker names a missing test fails it."""
    import tests.test_doc_markers as module

    (tmp_path / "docs").mkdir()
    marker = "<!-- ran by: tests/test_doc_markers.py::no_such_test -->"
    (tmp_path / "docs" / "p.md").write_text(f"{marker}\n```bash\nls\n```\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_doc_markers.py").write_text(Path(module.__file__).read_text())
    monkeypatch.setattr(module, "REPO", tmp_path)
    with pytest.raises(AssertionError, match="has no test no_such_test"):
        test_every_bash_block_names_a_test_that_reads_its_page("docs/p.md")


def test_the_readme_links_resolve():
    """mkdocs checks the links of docs/ (--strict); the README's own links into docs/ are checked here."""
    text = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert len(local) > 20
    assert [t for t in local if not (REPO / t).exists()] == []
