"""The book builds offline from book.yml, lists every chapter in order, and every page has content.

The web theme is downloaded at build time, so offline only ``--site`` works; it needs a stub theme template
(``myst: v1``, ``kind: site``). Executing notebooks inside MyST as root needs a Jupyter server that allows root.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def toc_files() -> list[str]:
    return re.findall(r"^\s*- file:\s*(\S+)\s*$", (ROOT / "book.yml").read_text(), flags=re.MULTILINE)


def test_toc_has_the_landing_page_and_every_chapter_in_order():
    chapters = [f"chapters/{p.name}" for p in sorted((ROOT / "chapters").glob("*.ipynb"))]
    assert toc_files() == ["intro.md", "notation.md", *chapters]


def test_every_citation_key_is_in_the_bibliography():
    bib = set(re.findall(r"@\w+\{(\w+),", (ROOT / "references.bib").read_text()))
    cited = set()
    for path in [ROOT / "intro.md", *sorted((ROOT / "solutions").glob("*.ipynb"))]:
        text = path.read_text(encoding="utf-8")
        cited |= set(re.findall(r"\[?@([a-z]+\d{4}[a-z]+)", text))
    assert cited, "the book cites nothing"
    assert cited <= bib, f"cited but not in references.bib: {sorted(cited - bib)}"


@pytest.mark.slow
@pytest.mark.notebook
def test_book_builds_offline_with_content_and_no_warnings(tmp_path):
    myst = shutil.which("myst")
    if myst is None:
        pytest.skip("mystmd is not installed (pip install 'ttr-edu[book]')")
    build = tmp_path / "book"
    shutil.copytree(ROOT, build, ignore=shutil.ignore_patterns("_build", ".git", "*.egg-info", "__pycache__", ".venv"))
    theme = build / "_build/templates/site/myst/book-theme"
    theme.mkdir(parents=True)
    (theme / "template.yml").write_text("myst: v1\nkind: site\n")
    config = tmp_path / "jupyter"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"allow_root": True}}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config)}
    result = subprocess.run(
        [myst, "--config", "book.yml", "build", "--site", "--execute"],
        cwd=build, env=env, capture_output=True, text=True, timeout=1500,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    problems = [line for line in log.splitlines() if re.search(r"⚠️|⛔️|warning|error", line, re.IGNORECASE)]
    assert not problems, "\n".join(problems)

    pages = {}
    for path in (build / "_build/site/content").glob("*.json"):
        page = json.loads(path.read_text())
        pages[page["location"].lstrip("/")] = (page["frontmatter"].get("title", ""), json.dumps(page["mdast"]))
    for file in toc_files():
        assert file in pages, f"{file} produced no page"
        title, body = pages[file]
        assert title, f"{file}: no title"
        assert body.count('"type": "paragraph"') >= 3, f"{file}: almost no text"
        if file.endswith(".ipynb"):
            assert '"type": "output"' in body and '"data"' in body, f"{file}: no executed outputs"
