"""The stars and hints of the exercises follow CONTRIBUTING.md ("Stars and hints"): every heading has one of the three
ratings, its minutes fall in its rating's range, and a hint for ★★ or ★★★ holds no code."""

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
    "08_adaptive_and_deep_memories",
    "10_language_modelling",
    "11_chunkwise_algorithms",
    "12_triton_kernels",
]
HEADING = re.compile(r"^### (?:Exercise|Puzzle) (\d+\.\d+) — .*? (★☆☆|★★☆|★★★) \(about (\d+) minutes\)$", re.MULTILINE)
MINUTES = {1: (5, 10), 2: (10, 20), 3: (20, 30)}
# every dropdown of an exercise's cell is a hint but the rules its check applies ("What the check counts"), which name
# the calls they count and may hold code at any rating
HINT = re.compile(r"^:::\{dropdown\}(?! What the check counts)[^\n]*\n(.*?)^:::$", re.MULTILINE | re.DOTALL)


def exercises(chapter: str) -> list[tuple[str, int, int, list[str]]]:
    """(number, stars, minutes, hints) of every exercise heading, the hints being the dropdowns of its cell."""
    found = []
    nb = nbformat.read(ROOT / "solutions" / f"{chapter}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "markdown" or not ("### Exercise" in cell.source or "### Puzzle" in cell.source):
            continue
        headings = list(HEADING.finditer(cell.source))
        assert headings, f"{chapter}: an exercise heading without a rating '(★☆☆|★★☆|★★★) (about N minutes)'"
        for i, heading in enumerate(headings):
            end = headings[i + 1].start() if i + 1 < len(headings) else len(cell.source)
            hints = HINT.findall(cell.source[heading.end() : end])
            found.append((heading[1], heading[2].count("★"), int(heading[3]), hints))
    return found


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_is_rated_and_its_time_fits_the_rating(chapter):
    rated = exercises(chapter)
    assert rated, f"{chapter} has no exercise"
    for number, stars, minutes, _ in rated:
        low, high = MINUTES[stars]
        assert low <= minutes <= high, f"Exercise {number}: {stars} stars and about {minutes} minutes"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_hint_for_two_or_three_stars_holds_no_code(chapter):
    for number, stars, _, hints in exercises(chapter):
        if stars >= 2:
            coded = [hint for hint in hints if "`" in hint]
            assert not coded, f"Exercise {number} ({stars} stars) has code in a hint: {coded[0][:120]!r}"


def test_the_check_finds_code_in_a_hint():
    source = "### Exercise 9.1 — x ★★☆ (about 10 minutes)\n\n:::{dropdown} Hint\nUse `torch.outer(a, b)`.\n:::\n"
    (heading,) = HEADING.finditer(source)
    assert HINT.findall(source[heading.end() :]) == ["Use `torch.outer(a, b)`.\n"]
