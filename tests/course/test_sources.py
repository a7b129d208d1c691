"""The sources ledger: sources.yaml follows its schema, sources.md is generated from it, every entry is linked by a
chapter and every chapter link names an entry, in solutions/ and in chapters/ alike, and the student copy carries
the page and its anchors."""

import re
from pathlib import Path, PurePosixPath

import nbformat
import pytest

from ttr_edu.course.notebooks import list_chapters
from ttr_edu.course.sources import (
    SourcesError,
    ledger_problems,
    linked_ids,
    load_entries,
    sources_markdown,
)
from ttr_edu.course.student_copy import render

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = load_entries(ROOT / "sources.yaml")
COMMIT = "ebe13ea2e6409da91d12d22175f4f6efe8bf2f0a"


def pages(folder: str) -> list[Path]:
    """The chapter notebooks of one folder and the book's Markdown pages (those in book.yml's table of contents)."""
    toc = re.findall(r"^\s*- file:\s*(\S+\.md)\s*$", (ROOT / "book.yml").read_text(), flags=re.MULTILINE)
    return sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb")) + [ROOT / name for name in toc]


def test_the_ledger_has_entries_with_a_source_each():
    assert ENTRIES, "sources.yaml holds no entry"
    assert all(entry.sources for entry in ENTRIES)


@pytest.mark.parametrize("folder", ["solutions", "chapters"])
def test_every_entry_is_linked_and_every_link_names_an_entry(folder):
    assert ledger_problems(ENTRIES, pages(folder)) == []


def test_sources_md_is_the_page_generated_from_the_yaml():
    titles = {c.number: (c.filename, c.title) for c in list_chapters(ROOT)}
    assert (ROOT / "sources.md").read_text(encoding="utf-8") == sources_markdown(ENTRIES, titles), (
        "sources.md is stale: run `ttr-edu generate`"
    )


def test_the_page_holds_an_anchor_for_every_entry():
    text = (ROOT / "sources.md").read_text(encoding="utf-8")
    for entry in ENTRIES:
        assert f"({entry.id})=\n### {entry.id}\n" in text


def test_the_student_copy_aims_each_link_at_the_copied_page_which_holds_its_anchor():
    chapter = next(p for p in sorted((ROOT / "chapters").glob("*.ipynb")) if linked_ids(p.read_text(encoding="utf-8")))
    data, linked = render(ROOT, PurePosixPath("chapters", chapter.name))
    text = "\n".join(cell.source for cell in nbformat.reads(data.decode("utf-8"), as_version=4).cells)
    assert PurePosixPath("sources.md") in linked, "the page a chapter links is copied along"
    assert "../sources.md" not in text
    page, _ = render(ROOT, PurePosixPath("sources.md"))
    page_text = page.decode("utf-8")  # a Markdown page stays Markdown in the copy; JupyterLab anchors its headings
    ids = re.findall(r"\]\(sources\.md#([^)\s]+)\)", text)
    assert ids, "the copy's links point at sources.md#<id>, beside the chapter"
    assert all(f"### {i}\n" in page_text for i in ids)


def write_course(root: Path, ledger: str, chapter_markdown: str, chapter_code: str = "x = 1") -> list[Path]:
    (root / "sources.yaml").write_text(ledger, encoding="utf-8")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(chapter_markdown), nbformat.v4.new_code_cell(chapter_code)]
    path = root / "04_delta_rule.ipynb"
    nbformat.write(nb, path)
    return [path]


ENTRY = f"""
- id: 04-authors-evaluation
  claim: the authors evaluate on sequences of length S
  source:
    repo: ischlag/fast-weight-transformers
    commit: {COMMIT}
    path: synthetic/associativeRetrievalDataset.py
    lines: 96-122
  says: every unique key is queried once
"""


def test_the_check_fails_on_an_unlinked_entry_a_missing_id_a_code_link_and_a_wrong_prefix(tmp_path):
    chapter = write_course(
        tmp_path,
        ENTRY + ENTRY.replace("04-authors-evaluation", "03-unused"),
        "See [source](../sources.md#04-authors-evaluation) and [source](../sources.md#04-missing).",
        "claims.say('[source](../sources.md#04-authors-evaluation)')",
    )
    problems = ledger_problems(load_entries(tmp_path / "sources.yaml"), chapter)
    assert any("04-missing, which is not in the ledger" in p for p in problems), problems
    assert any("03-unused is linked by no chapter" in p for p in problems), problems
    assert any("a code cell links" in p for p in problems), problems
    chapter = write_course(
        tmp_path, ENTRY.replace("04-authors", "03-authors"), "[s](../sources.md#03-authors-evaluation)"
    )
    problems = ledger_problems(load_entries(tmp_path / "sources.yaml"), chapter)
    assert problems == ["sources.yaml: 03-authors-evaluation is first linked by chapter 04, not 03"]


@pytest.mark.parametrize(
    "change, message",
    [
        (("ebe13ea2", "ebe13ea"), "commit must be 40 hex digits"),
        (("04-authors-evaluation", "authors-evaluation"), "id must be kebab-case"),
        (("lines: 96-122", "lines: 122-96"), "lines must be N or N-M"),
        (("  says:", "  note: x\n  says:"), "unknown fields"),
        (("    path: synthetic/associativeRetrievalDataset.py\n", ""), "code needs exactly repo, commit, path"),
    ],
)
def test_a_schema_error_names_its_entry_and_field(tmp_path, change, message):
    (tmp_path / "sources.yaml").write_text(ENTRY.replace(*change), encoding="utf-8")
    with pytest.raises(SourcesError, match=message):
        load_entries(tmp_path / "sources.yaml")


def test_an_id_used_twice_is_refused(tmp_path):
    (tmp_path / "sources.yaml").write_text(ENTRY + ENTRY, encoding="utf-8")
    with pytest.raises(SourcesError, match="used twice"):
        load_entries(tmp_path / "sources.yaml")


def test_code_renders_as_a_link_to_its_lines_at_the_commit_and_a_paper_with_its_place():
    text = sources_markdown(ENTRIES)
    code = next(s for e in ENTRIES for s in e.sources if s.is_code)
    assert f"https://github.com/{code.repo}/blob/{code.commit}/{code.path}#L" in text
    paper = next(s for e in ENTRIES for s in e.sources if not s.is_code)
    assert paper.where in text
