"""The two galleries each chapter's check tests keep (CONTRIBUTING.md, "Notebooks and exercises").

* **Wrong answers**: what a student might plausibly write, each refused by its check for its own reason (the regex
  of the entry: a wrong value, a broken rule, a loop, a detached gradient...).
* **Right answers written differently** (another spelling, a loop where none is ruled out, float32 inputs, a
  vectorised form): each passes, or, where it computes in another dtype than the exercise asks, fails or passes with
  a message that names both dtypes.

Entries are ``(label, check, answer, expected)``; :func:`refused` and :func:`accepted` run one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from ttr_edu.checks import CheckFailed

#: a right answer computed in float32 where the exercise works in float64: named in the message, whatever the verdict
DTYPE_NAMED = r"float32.*float64|float64.*float32"


def ids(gallery: list[tuple]) -> list[str]:
    return [entry[0] for entry in gallery]


def refused(check: Callable, answer: Callable, reason: str, capsys: pytest.CaptureFixture) -> None:
    """``check(answer)`` raises :class:`CheckFailed` with a message matching ``reason``, and prints no PASS."""
    with pytest.raises(CheckFailed, match=reason):
        check(answer)
    assert "PASS" not in capsys.readouterr().out


def accepted(check: Callable, answer: Callable, expected: str | None, capsys: pytest.CaptureFixture) -> None:
    """``check(answer)`` passes (``expected`` None), or, when ``expected`` is a regex (a dtype), either passes with a
    note matching it or fails with a message matching it."""
    try:
        verdict = check(answer)
    except CheckFailed as failure:
        assert expected is not None, f"a right answer was refused: {failure}"
        assert re.search(expected, str(failure), re.S), str(failure)
        return
    out = capsys.readouterr().out
    assert verdict is True and out.startswith("PASS"), out
    if expected is not None:
        assert re.search(expected, out, re.S), out
