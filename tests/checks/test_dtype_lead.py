"""Every declared exercise that works in float64: a right answer computed in float32 gets a verdict that names the
dtype first (both dtypes), before the values, whether it returns float32 or widens its result back to float64.

The float32 answer is the reference run on the case's inputs rounded to float32 (computed before the check, so the
answer itself calls nothing of the package); exercises whose rules would refuse such an answer for another reason
(gradients kept, operations counted or timed, a custom call such as a Triton launch) are left out."""

from __future__ import annotations

import importlib
import math
import pkgutil
import re

import pytest
import torch

import ttr_edu.checks
from tests.checks.gallery import verdict

DTYPES_FIRST = re.compile(
    r"^\w+(\[\d+\])*: (wrong dtype: your result is float32, the exercise works in float64|your "
    r"result is float64, but every value in it is a float32 number)"
)


def declared_in_float64():
    found = []
    for info in pkgutil.iter_modules(ttr_edu.checks.__path__):
        if info.name.startswith("_") or info.name == "grading":
            continue
        module = importlib.import_module(f"ttr_edu.checks.{info.name}")
        for name in sorted(vars(module)):
            declared = getattr(getattr(module, name), "__exercise__", None)
            if declared is None or not name.startswith("check_") or not hasattr(declared, "rules"):
                continue  # a staged check (chapter 13's capstone) has no cases of its own to widen
            rules = declared.rules
            if rules.keep_grad or rules.op_count or rules.work or rules.source or rules.watch:
                continue
            if declared.call is not ttr_edu.checks._rules._call:
                continue
            cases = list(declared.cases())
            floats = [v for c in cases for v in c.values() if isinstance(v, torch.Tensor) and v.is_floating_point()]
            if floats and all(v.dtype == torch.float64 for v in floats):
                found.append(pytest.param(getattr(module, name), declared, cases, id=declared.name))
    return found


def narrowed(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.float()
    if type(value) in (tuple, list):
        return type(value)(narrowed(v) for v in value)
    return value


def widened(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    if type(value) in (tuple, list):
        return type(value)(widened(v) for v in value)
    return value


def answers_in_float32(declared, cases, widen: bool):
    """An answer that returns, for each case, the reference's result on float32 inputs (widened or not)."""
    results = [narrowed(declared.reference(**{k: narrowed(v) for k, v in case.items()})) for case in cases]
    results = [widened(r) if widen else r for r in results]
    originals = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case.items()} for case in cases]

    def answer(**given):
        for case, result in zip(originals, results):
            if case.keys() == given.keys() and all(
                torch.equal(v, given[k]) if isinstance(v, torch.Tensor) else v == given[k] for k, v in case.items()
            ):
                return result
        raise AssertionError("a case the test did not see")

    return answer


@pytest.mark.parametrize("widen", [False, True], ids=["float32 result", "widened to float64"])
@pytest.mark.parametrize("check, declared, cases", declared_in_float64())
def test_a_float32_answer_is_told_its_dtype_first(check, declared, cases, widen):
    passed, message = verdict(check, answers_in_float32(declared, cases, widen))
    if passed:  # within the exercise's tolerance: the PASS line must still name both dtypes when they differ
        assert widen or re.search(r"float32.*float64", message), message
        return
    assert DTYPES_FIRST.match(message), message


def test_a_float64_answer_that_lands_on_float32_numbers_only_where_they_tell_nothing_gets_no_note():
    # r35j: a right 8.2 answer at θ = π/2 is [2⁻⁵², −1, 1, 2⁻⁵²] against the reference's cos(π/2) ≈ 6e-17: every value
    # a float32 number, yet computed in float64; it was told "computed in float32 and widened"
    from ttr_edu.checks._core import _dtype_lead

    want = torch.tensor([[math.cos(math.pi / 2), -1.0], [1.0, math.cos(math.pi / 2)]], dtype=torch.float64)
    got = torch.tensor([[2.0**-52, -1.0], [1.0, 2.0**-52]], dtype=torch.float64)
    assert _dtype_lead(got, want) == ""
    telling = torch.tensor([[0.1, -1.0], [1.0, 1 / 3]], dtype=torch.float64)  # a float32 answer widened is still told
    assert "every value in it is a float32" in _dtype_lead(telling.float().double(), telling)
