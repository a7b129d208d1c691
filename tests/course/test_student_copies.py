"""JupyterLab shows what the book shows: every notebook and page `ttr-edu copy` writes into a student's folder has its
citations written out (jupyterlab-myst has no bibliography) and every link aimed inside that folder (JupyterLab
serves nothing above it). chapters/ keeps MyST's [@key], which the book resolves."""

import json
import re
import shutil
from pathlib import Path, PurePosixPath

import nbformat
import pytest

from ttr_edu.course import student_copy
from ttr_edu.course.cli import main
from ttr_edu.course.student_copy import REFERENCES_CELL, load_bibliography, render, render_citations

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
KEYS = set(load_bibliography(ROOT / "references.bib"))

_CODE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\1[ \t]*$|`[^`\n]*`", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)")  # a markdown link's or image's target
CITED = re.compile(r"(?<![\w.])@([A-Za-z][\w:-]*\w)")
_HTML = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""")


def _texts(path: Path) -> list[str]:
    """The markdown a reader sees in a notebook or page, without code."""
    if path.suffix == ".ipynb":
        texts = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    else:
        texts = [path.read_text(encoding="utf-8")]
    return [_CODE.sub(" ", text) for text in texts]


def folder_problems(folder: Path) -> list[str]:
    """What JupyterLab would show wrong in a student's folder: a raw citation key, or a link that leaves the folder
    or names a file that is not there. Used by the wheel test too."""
    folder = folder.resolve()
    problems = []
    for path in sorted([*folder.rglob("*.ipynb"), *folder.rglob("*.md")]):
        name = path.relative_to(folder)
        for text in _texts(path):
            problems += [f"{name}: raw citation @{key}" for key in CITED.findall(text) if key in KEYS]
            problems += [f"{name}: raw citation {group}..." for group in re.findall(r"\[-?@\w*", text)]
            for target in _LINK.findall(text) + _HTML.findall(text):
                if re.match(r"^(https?|mailto):", target) or target.startswith("#"):
                    continue
                if re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
                    problems.append(f"{name}: link {target} is not relative to the folder")
                    continue
                resolved = (path.parent / target.split("#")[0]).resolve()
                if not resolved.is_relative_to(folder):
                    problems.append(f"{name}: link {target} leaves the folder")
                elif not resolved.exists():
                    problems.append(f"{name}: dead link {target}")
    return problems


def test_every_student_notebook_has_no_raw_citation_and_no_link_out_of_the_folder(tmp_path, capsys):
    dest = tmp_path / "my-course"
    assert main(["--root", str(ROOT), "copy", str(dest)]) == 0
    assert sorted(p.name for p in dest.glob("*.ipynb")) == sorted(p.name for p in CHAPTERS)
    assert (dest / "notation.md").is_file(), "every chapter links the notation page: it is copied along"
    assert (dest / "sources.md").is_file(), "the chapters link the sources ledger: it is copied along"
    assert folder_problems(dest) == []
    first = nbformat.read(dest / CHAPTERS[0].name, as_version=4)
    text = "\n".join(cell.source for cell in first.cells)
    assert "[Steinbuch, 1961](https://doi.org/10.1007/BF00293853)" in text  # written out as a link to the paper
    assert "[notation page](notation.md)" in text  # aimed at the copy, which JupyterLab opens rendered
    references = first.cells[-1]
    assert references.id == REFERENCES_CELL and references.source.startswith("## References\n")
    assert "- Steinbuch (1961). Die Lernmatrix. Kybernetik. <https://doi.org/10.1007/BF00293853>" in references.source


def test_the_check_finds_what_the_book_form_would_break_in_jupyterlab(tmp_path):
    """chapters/ as it is (MyST citations, ../notation.md) fails the check: the check can fail."""
    folder = tmp_path / "raw"
    folder.mkdir()
    shutil.copy(CHAPTERS[0], folder)
    found = folder_problems(folder)
    assert any("raw citation @steinbuch1961lernmatrix" in p for p in found), found
    assert any("../notation.md leaves the folder" in p for p in found), found
    assert any("dead link 02_linear_attention_is_fwp.ipynb" in p for p in found), found  # not copied beside it


def test_chapters_keep_myst_citations_for_the_book():
    assert all("[@" in path.read_text(encoding="utf-8") for path in CHAPTERS[:1])


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name[:2])
def test_only_markdown_changes_and_the_copy_is_a_valid_notebook(chapter):
    """Code cells (and so nbgrader's locked check cells and their checksums) are copied exactly; a cell listing the
    references is added at the end."""
    copy = nbformat.reads(render(ROOT, PurePosixPath("chapters", chapter.name))[0].decode("utf-8"), as_version=4)
    nbformat.validate(copy)
    original = nbformat.read(chapter, as_version=4)
    if copy.cells[-1].get("id") == REFERENCES_CELL:
        copy.cells.pop()
    assert len(copy.cells) == len(original.cells)
    for mine, theirs in zip(copy.cells, original.cells):
        assert (mine.cell_type, mine.get("id"), mine.metadata) == (theirs.cell_type, theirs.get("id"), theirs.metadata)
        if mine.cell_type == "code":
            assert mine.source == theirs.source


# -- citations -----------------------------------------------------------------------------------------------------


BIB = load_bibliography(ROOT / "references.bib")


def test_every_reference_renders_as_text_a_reader_can_read():
    assert len(BIB) >= 20
    for key, ref in BIB.items():
        for text in (ref.short, ref.full):
            assert not re.search(r"[\\{}]", text), f"{key}: LaTeX left in {text!r}"
        assert ref.link.startswith("https://"), f"{key}: no DOI or URL to link"
    assert BIB["irie2022dual"].full.startswith("Irie, Csordás & Schmidhuber (2022).")
    assert BIB["joffrain2006accumulating"].full.startswith("Joffrain, Low, Quintana-Ortí, van de Geijn & Van Zee")
    assert BIB["widrow1960adaptive"].short == "Widrow & Hoff, 1960"
    assert BIB["hopfield1982neural"].short == "Hopfield, 1982"
    assert BIB["vonoswald2025mesanet"].short == "von Oswald et al., 2025"


def test_a_citation_group_becomes_author_year_links_with_its_locators():
    text = "as shown [@schlag2021linear, eq. 13;\n@katharopoulos2020transformers, eq. 6]."
    cited = set()
    out = render_citations(text, BIB, cited)
    assert out == (
        "as shown ([Schlag et al., 2021](https://arxiv.org/abs/2102.11174), eq. 13; "
        "[Katharopoulos et al., 2020](https://arxiv.org/abs/2006.16236), eq. 6)."
    )
    assert cited == {"schlag2021linear", "katharopoulos2020transformers"}


def test_a_narrative_citation_names_the_authors_with_the_year_in_brackets():
    out = render_citations("as @hopfield1982neural showed", BIB)
    assert out == "as [Hopfield (1982)](https://doi.org/10.1073/pnas.79.8.2554) showed"


def test_unknown_keys_code_and_emails_are_left_as_written():
    for text in ("[@nobody2020missing]", "`[@schlag2021linear]`", "write to someone@example.org", "[see](#@x)"):
        assert render_citations(text, BIB) == text


def test_a_doi_with_brackets_stays_one_link():
    out = render_citations("[@anderson1972simple]", BIB)
    assert out == "([Anderson, 1972](https://doi.org/10.1016/0025-5564%2872%2990075-2))"


# -- links and pages -----------------------------------------------------------------------------------------------


def small_course(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    (root / "chapters").mkdir(parents=True)
    (root / "images").mkdir()
    (root / "images" / "fig.svg").write_text("<svg/>", encoding="utf-8")
    (root / "references.bib").write_text((ROOT / "references.bib").read_text(encoding="utf-8"), encoding="utf-8")
    (root / "notation.md").write_text(
        "---\ntitle: Notation\n---\n\nSymbols [@hopfield1982neural]; back to [one](chapters/01_one.ipynb).\n"
    )
    cells = [
        nbformat.v4.new_markdown_cell(
            "# 01 · One\nSee the [notation](../notation.md#sizes), ![a figure](../images/fig.svg), "
            "[two](02_two.ipynb), [the web](https://example.org) and [a missing page](../missing.md)."
        ),
        nbformat.v4.new_code_cell("x = '[@hopfield1982neural](../notation.md)'"),
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), root / "chapters" / "01_one.ipynb")
    return root


def test_links_are_aimed_inside_the_students_folder_and_pages_come_along(tmp_path):
    root = small_course(tmp_path)
    data, linked = render(root, PurePosixPath("chapters/01_one.ipynb"))
    nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    text = nb.cells[0].source
    assert "[notation](notation.md#sizes)" in text and "![a figure](images/fig.svg)" in text
    assert "[two](02_two.ipynb)" in text and "(https://example.org)" in text
    assert "(../missing.md)" in text  # not a course file: left as written, and the folder check reports it
    assert nb.cells[1].source == "x = '[@hopfield1982neural](../notation.md)'"  # code is never touched
    assert linked == {PurePosixPath("notation.md"), PurePosixPath("images/fig.svg")}
    pages = student_copy.linked_pages(root, linked)
    assert set(pages) == {PurePosixPath("notation.md"), PurePosixPath("images/fig.svg")}
    page = pages[PurePosixPath("notation.md")].decode("utf-8")
    assert page.startswith("# Notation\n\nSymbols ([Hopfield, 1982](https://doi.org/")  # the front matter's title
    assert "[one](01_one.ipynb)" in page  # the page's own links follow
    assert page.split("## References\n", 1)[1].count("Hopfield (1982)") == 1  # its references at its end


def test_an_edited_page_is_kept_and_a_changed_release_of_it_is_announced(tmp_path, capsys):
    root = small_course(tmp_path)
    dest = tmp_path / "mine"
    assert main(["--root", str(root), "copy", str(dest)]) == 0
    assert (dest / "notation.md").is_file() and (dest / "images" / "fig.svg").read_text() == "<svg/>"
    manifest = json.loads((dest / ".ttr-edu-copy.json").read_text())
    assert set(manifest["pages"]) == {"notation.md", "images/fig.svg"}
    (dest / "notation.md").write_text("my notes", encoding="utf-8")
    capsys.readouterr()
    assert main(["--root", str(root), "copy", str(dest)]) == 0
    assert (dest / "notation.md").read_text() == "my notes" and "notation" not in capsys.readouterr().out
    (root / "notation.md").write_text("Symbols, second edition.\n")
    (root / "images" / "fig.svg").write_text("<svg>2</svg>")
    assert main(["--root", str(root), "copy", str(dest)]) == 0
    out = capsys.readouterr().out
    assert "kept your notation.md (edited)" in out
    assert (dest / "notation.md").read_text() == "my notes"
    assert (dest / "images" / "fig.svg").read_text() == "<svg>2</svg>"  # untouched: refreshed
