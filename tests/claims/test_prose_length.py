"""No wall of text: a run of prose longer than about 250 words gets a figure, a formula, a table or code between.

A markdown cell is cut into runs of prose at display formulas (``$$ … $$``), fenced code, tables, block quotes,
headings, paragraphs that open with a bold label (``**Learning objectives.**``) and MyST fences (``:::``, whose
content, a hint, is a run of its own); a code cell between two markdown cells ends a run
too, since it shows code and usually a figure or numbers. Each run must stay under :data:`LIMIT` words.
"""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = [
    "01_hebbian_memory",
    "02_linear_attention_is_fwp",
    "03_feature_maps_and_capacity",
    "04_delta_rule",
    "05_dual_form",
    "06_test_time_regression_parametric",
    "07_test_time_regression_nonparametric",
]
LIMIT = 250


def prose_runs(markdown: str) -> list[str]:
    """The runs of prose of one markdown cell, cut at formulas, code, tables, quotes and MyST fences."""
    runs, current, in_math, in_code = [], [], False, False

    def cut():
        if current:
            runs.append(" ".join(current))
            current.clear()

    for line in markdown.splitlines():
        stripped = line.strip()
        if in_code:
            in_code = not stripped.startswith("```")
            continue
        if stripped.startswith("```"):
            cut()
            in_code = True
            continue
        if in_math:
            in_math = stripped.count("$$") % 2 == 0
            continue
        if stripped.startswith("$$"):
            cut()
            in_math = stripped.count("$$") % 2 == 1
            continue
        if stripped.startswith(("|", ">", ":::")):
            cut()
            continue
        if stripped.startswith("#") or re.match(r"\*\*[^*]+[.:]\*\*", stripped):  # a heading, a labelled paragraph
            cut()
        if "$$" in stripped:  # a display formula that starts at the end of a prose line
            current.append(stripped.split("$$")[0])
            cut()
            in_math = stripped.count("$$") % 2 == 1
            continue
        current.append(stripped)
    cut()
    return runs


def words(text: str) -> int:
    return len(re.findall(r"\S+", text))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_run_of_prose_is_longer_than_the_limit(chapter):
    notebook = nbformat.read(ROOT / "solutions" / f"{chapter}.ipynb", as_version=4)
    too_long = [
        f"cell {i}: {words(run)} words, starting {run[:60]!r}"
        for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "markdown"
        for run in prose_runs(cell.source)
        if words(run) > LIMIT
    ]
    assert not too_long, "break these up with a formula, a table, a figure or code:\n" + "\n".join(too_long)


def test_the_splitter_cuts_at_formulas_code_and_tables():
    text = "one two\n\n$$x$$\n\nthree\n```python\ncode here\n```\nfour five\n| a | b |\nsix\n## Title\nseven"
    assert [words(r) for r in prose_runs(text)] == [2, 1, 2, 1, 3]
