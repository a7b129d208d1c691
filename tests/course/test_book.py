"""The book: book.yml lists every chapter, its theme is pinned, its references resolve, and `ttr-edu book` builds it
only when every notebook really executed (and leaves no Jupyter server behind).

The web theme is downloaded at build time, so offline only ``--site`` works: the test puts a stub theme
(``myst: v1``, ``kind: site``) where MyST keeps the pinned theme (:func:`ttr_edu.book.theme_folder`).
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from ttr_edu.course import book
from ttr_edu.course.book import BookError, page_problems, site_problems, theme_folder
from ttr_edu.course.cli import main

ROOT = Path(__file__).resolve().parents[2]


def toc_files() -> list[str]:
    return re.findall(r"^\s*- file:\s*(\S+)\s*$", (ROOT / "book.yml").read_text(), flags=re.MULTILINE)


def test_toc_has_the_landing_page_every_chapter_in_order_the_sources_and_the_instructor_guide():
    chapters = [f"chapters/{p.name}" for p in sorted((ROOT / "chapters").glob("*.ipynb"))]
    assert toc_files() == ["intro.md", "notation.md", *chapters, "sources.md", "grading.md"]


def test_every_citation_key_is_in_the_bibliography():
    bib = set(re.findall(r"@\w+\{(\w+),", (ROOT / "references.bib").read_text()))
    cited = set()
    for path in [ROOT / "intro.md", *sorted((ROOT / "solutions").glob("*.ipynb"))]:
        text = path.read_text(encoding="utf-8")
        cited |= set(re.findall(r"\[?@([a-z]+\d{4}[a-z]+)", text))
    assert cited, "the book cites nothing"
    assert cited <= bib, f"cited but not in references.bib: {sorted(cited - bib)}"


def test_every_bibliography_entry_has_a_doi_or_url():
    entries = re.findall(r"@\w+\{(\w+),(.*?)\n\}", (ROOT / "references.bib").read_text(), flags=re.DOTALL)
    assert entries
    missing = [key for key, body in entries if not re.search(r"^\s*(doi|url)\s*=", body, flags=re.MULTILINE)]
    assert not missing, f"no DOI or URL: {missing}"


def test_the_theme_is_pinned_and_the_book_has_a_logo():
    config = (ROOT / "book.yml").read_text()
    template = re.search(r"^\s*template:\s*(\S+)", config, flags=re.MULTILINE).group(1)
    assert re.fullmatch(r"https://\S+/archive/[0-9a-f]{40}\.zip", template), "the theme must be a pinned archive"
    for option in ("logo", "favicon"):
        path = re.search(rf"^\s*{option}:\s*(\S+)", config, flags=re.MULTILINE).group(1)
        assert (ROOT / path).is_file() and "<svg" in (ROOT / path).read_text()


def test_relative_notebook_links_point_at_existing_chapters():
    """A link such as `[the delta rule](04_delta_rule.ipynb)` must name a chapter file as it is numbered today."""
    names = {p.name for p in (ROOT / "chapters").glob("*.ipynb")}
    broken = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")) + sorted(ROOT.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(((?:\.\./chapters/|chapters/|\./)?[\w.-]+\.ipynb)(?:#[\w-]*)?\)", text):
            if Path(target).name not in names:
                broken.append(f"{path.name} -> {target}")
    assert not broken, f"links to missing chapters: {broken}"


# -- what `ttr-edu book` checks in the built pages ------------------------------------------------------------------


def page(location, *children):
    return {"location": location, "mdast": {"type": "root", "children": list(children)}}


def text(value):
    return {"type": "paragraph", "children": [{"type": "text", "value": value}]}


def cell(*outputs):
    return {
        "type": "block",
        "children": [{"type": "code", "value": "x"}, *({"type": "output", "jupyter_data": o} for o in outputs)],
    }


PLOT = {"output_type": "display_data", "data": {"application/vnd.plotly.v1+json": {"data": []}}}
WIDGET = {"output_type": "display_data", "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "m"}}}
STREAM = {"output_type": "stream", "name": "stdout", "text": "PASS"}
MARKDOWN_SAY = {"text/markdown": "Recall holds up to $N = d$.", "text/plain": "<IPython.core.display.Markdown object>"}


@pytest.mark.parametrize(
    "bad,problem",
    [
        (page("/chapters/01_x.ipynb", text("Read more"), cell()), "did not execute"),
        (
            page("/chapters/01_x.ipynb", cell(STREAM, {"output_type": "error", "ename": "ValueError", "evalue": "x"})),
            "error output ValueError",
        ),
        (page("/chapters/01_x.ipynb", cell(WIDGET, PLOT)), "widget output with no static figure"),
        (page("/chapters/01_x.ipynb", cell(STREAM), text("as shown in [@nobody2020missing]")), "raw citation"),
        (
            page(
                "/chapters/01_x.ipynb",
                cell({"output_type": "display_data", "data": {"text/html": "<div class='plotly'>"}}),
            ),
            "HTML only",
        ),
        (  # claims.say as JupyterLab shows it: the book's theme has no Markdown parser for outputs
            page("/chapters/01_x.ipynb", cell({"output_type": "display_data", "data": MARKDOWN_SAY})),
            "text/markdown output shown as raw text",
        ),
        (
            page("/chapters/01_x.ipynb", cell({"output_type": "execute_result", "data": {"text/plain": "1 of $d$"}})),
            "raw maths '$d$'",
        ),
        (page("/chapters/01_x.ipynb", cell({**STREAM, "text": "error grows like $\\sqrt{T}$\n"})), "raw maths"),
        (  # an unsolved exercise as the student's kernel shows it: the book's reader has no kernel
            page("/chapters/01_x.ipynb", cell({**STREAM, "text": "[not attempted yet] write: fill in the function\n"})),
            "shows '[not attempted yet]' to the book's readers",
        ),
    ],
)
def test_page_problems_finds_each_kind_of_broken_page(bad, problem):
    found = page_problems(bad)
    assert any(problem in line for line in found), found


def test_a_healthy_page_has_no_problems():
    assert page_problems(page("/chapters/01_x.ipynb", text("Figure"), cell(STREAM, PLOT, WIDGET))) == []


def test_an_unsolved_exercise_shows_the_book_a_note_and_the_student_the_not_attempted_line(monkeypatch, capsys):
    """The book is built from the student copies: every exercise is unsolved there. Its check tells the book's reader
    that the exercise is done in JupyterLab, and the page check accepts that; in the kernel it says "not attempted"."""
    from ttr_edu._internal.progress import BOOK_ENV
    from ttr_edu.checks.hebbian_memory import check_write

    def stub(**kwargs):
        raise NotImplementedError()

    monkeypatch.setenv(BOOK_ENV, "1")
    assert check_write(stub) is False
    shown = capsys.readouterr().out
    assert "[not attempted yet]" not in shown and "JupyterLab" in shown, shown
    assert page_problems(page("/chapters/01_x.ipynb", cell({**STREAM, "text": shown}))) == []
    monkeypatch.setenv(BOOK_ENV, "0")
    assert check_write(stub) is False
    assert capsys.readouterr().out.startswith("[not attempted yet] write:")


def test_say_writes_html_with_its_maths_marked_for_mathjax_while_the_book_builds(monkeypatch):
    """In JupyterLab `say` shows Markdown (jupyterlab-myst renders it); while the book builds, HTML whose maths the
    theme's MathJax typesets (inline \\(...\\) and display $$...$$, underscores inside left alone), which the page
    check accepts."""
    import IPython
    import IPython.display

    from ttr_edu.course import claims

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda *objects, **kw: shown.extend(objects))
    template = "The **rival** sits at {r} of $\\sqrt{{2 \\ln N}}$ and $a_1 < b_2$:\n\n$$\nS_t = S_{{t-1}}\n$$"
    claims.say(template, r=0.7)
    monkeypatch.setenv("TTR_EDU_BOOK", "1")
    claims.say(template, r=0.7)
    markdown, book = shown
    assert isinstance(markdown, IPython.display.Markdown) and "$a_1 < b_2$" in markdown.data
    assert set(book) == {"text/html", "text/plain"}
    html = book["text/html"]
    assert "<strong>rival</strong> sits at 0.7 of" in html and "\\(\\sqrt{2 \\ln N}\\)" in html
    assert "\\(a_1 &lt; b_2\\)" in html and "<em>" not in html  # the underscores stayed maths
    assert "$$\nS_t = S_{t-1}\n$$" in html
    said = {"output_type": "display_data", "data": book}
    assert page_problems(page("/chapters/01_x.ipynb", cell(STREAM, said))) == []


def test_book_fails_when_myst_exits_0_without_executing(tmp_path, monkeypatch):
    """MyST can exit 0 with no outputs (Jupyter did not start); `ttr-edu book` must not call that a success."""
    fake = tmp_path / "bin" / "myst"
    fake.parent.mkdir()
    content = tmp_path / "course" / "_build" / "site" / "content"
    fake.write_text(
        f'#!/bin/sh\nmkdir -p {content}\necho "$TTR_EDU_BOOK" > {tmp_path}/env\n'
        f"echo '{json.dumps(page('/chapters/01_x.ipynb', cell()))}' > {content}/01.json\nexit 0\n"
    )
    fake.chmod(0o755)
    (tmp_path / "course").mkdir()
    shutil.copy(ROOT / "book.yml", tmp_path / "course")  # its pinned theme: --site puts a stub in its place
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setattr(book, "find_myst", lambda: shutil.which("myst"))  # not the real MyST beside this Python
    monkeypatch.setattr(book, "jupyter_server", lambda root, env: __import__("contextlib").nullcontext(("u", "t")))
    with pytest.raises(BookError, match="did not execute"):
        book.build(tmp_path / "course", site=True, execute=True)
    assert (tmp_path / "env").read_text().strip() == "1"  # what MyST executes sees the book flag


def test_progress_bars_are_off_while_the_book_builds_and_on_otherwise(monkeypatch):
    from ttr_edu._internal.progress import progress_enabled

    monkeypatch.setenv("TTR_EDU_BOOK", "1")
    assert progress_enabled(True) is False and progress_enabled(None) is False
    monkeypatch.setenv("TTR_EDU_BOOK", "0")
    assert progress_enabled(True) is True
    monkeypatch.delenv("TTR_EDU_BOOK")
    assert progress_enabled(True) is True and progress_enabled(False) is False


def _jupyter_processes(marker: str) -> list[str]:
    # -ww: whole command lines (ps cuts them at 80 columns when it cannot tell a terminal's width)
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line and "jupyter" in line and "ps -eo" not in line]


@pytest.mark.slow
@pytest.mark.notebook
def test_book_builds_offline_executes_every_page_and_leaves_no_server(tmp_path):
    if shutil.which("myst") is None:
        pytest.skip("mystmd is not installed (pip install 'ttr-edu[book]')")
    build = tmp_path / "book"
    shutil.copytree(
        ROOT, build, ignore=shutil.ignore_patterns("_build", ".git", "*.egg-info", "__pycache__", ".venv", "my-course")
    )
    theme = theme_folder(build)
    theme.mkdir(parents=True)
    (theme / "template.yml").write_text("myst: v1\nkind: site\n")
    assert main(["--root", str(build), "book", "--site", "--execute"]) == 0  # --strict, then the page checks
    assert not _jupyter_processes(str(build)), "a Jupyter server or kernel outlived the build"

    content = build / "_build/site/content"
    assert site_problems(content) == []
    pages = {}
    for path in content.glob("*.json"):
        data = json.loads(path.read_text())
        pages[data["location"].lstrip("/")] = data
    for file in toc_files():
        assert file in pages, f"{file} produced no page"
        data = pages[file]
        body = json.dumps(data["mdast"])
        assert data["frontmatter"].get("title"), f"{file}: no title"
        assert body.count('"type": "paragraph"') >= 3, f"{file}: almost no text"
        if file.endswith(".ipynb"):
            source = "\n".join(c.source for c in nbformat.read(ROOT / file, 4).cells if c.cell_type == "code")
            if re.search(r"plotly|ttr_edu\.viz|from ttr_edu import .*viz|_figure\(", source):
                assert "application/vnd.plotly.v1+json" in body, f"{file}: makes figures but has no plotly JSON"
            assert "MQAR grid" not in body and "it/s]" not in body, f"{file}: a progress bar was saved"
            assert "[not attempted yet]" not in body, f"{file}: an unsolved exercise's raw line is shown to readers"


# Directives jupyterlab-myst 2.7.0 (the `course` extra) registers, read from its bundled JavaScript: what a notebook
# may use so that JupyterLab renders it as the book does (a hint is a `dropdown`; notes and tips are admonitions).
JUPYTERLAB_MYST_DIRECTIVES = {
    "admonition",
    "attention",
    "caution",
    "danger",
    "error",
    "important",
    "hint",
    "note",
    "seealso",
    "tip",
    "warning",
    "dropdown",
    "exercise",
    "exercise-start",
    "exercise-end",
    "solution",
    "figure",
    "image",
    "math",
    "code",
    "code-block",
    "code-cell",
    "csv-table",
    "list-table",
    "table",
    "card",
    "grid",
    "grid-item",
    "grid-item-card",
    "aside",
    "margin",
    "sidebar",
    "topic",
    "glossary",
    "bibliography",
    "embed",
    "include",
    "iframe",
    "mermaid",
    "epigraph",
    "pull-quote",
    "tab-set",
    "tab-item",
    "div",
    "proof",
    "prf:theorem",
    "prf:lemma",
    "prf:definition",
    "prf:proof",
    "prf:remark",
    "prf:example",
    "prf:proposition",
    "prf:corollary",
}


def test_notebooks_use_only_myst_directives_that_jupyterlab_myst_renders():
    used = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for c in nbformat.read(path, 4).cells:
            if c.cell_type == "markdown":
                for name in re.findall(r"^\s*(?::{3,}|`{3,})\{([\w:-]+)\}", c.source, flags=re.MULTILINE):
                    used.setdefault(name, path.name)
    unknown = {name: where for name, where in used.items() if name not in JUPYTERLAB_MYST_DIRECTIVES}
    assert not unknown, f"directives JupyterLab would show as raw text: {unknown}"
