"""The grader's fresh case (``ttr_edu.checks._rules.fresh_case``): every graded exercise of chapters 01–12 has one,
it is the same for the same secret (the grader rebuilds it from the secret alone), new for another secret, and of the
public cases' kind (the same input names, shapes and dtypes as the public case at its place)."""

import importlib
import pkgutil

import pytest
import torch

import ttr_edu.checks as checks
from ttr_edu.checks import _rules


def _declared():
    for module in pkgutil.iter_modules(checks.__path__):
        if module.name.startswith("_") or module.name == "grading":
            continue
        loaded = importlib.import_module(f"ttr_edu.checks.{module.name}")
        for name in dir(loaded):
            declared = getattr(getattr(loaded, name), "__exercise__", None)
            if declared is not None and not isinstance(declared, _rules.Staged):
                yield pytest.param(declared, id=f"{module.name}.{name}")


def _kind(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if type(value) in (tuple, list):
        return tuple(_kind(v) for v in value)
    return type(value).__name__


@pytest.mark.parametrize("declared", list(_declared()))
def test_every_exercise_has_a_fresh_case_of_its_public_cases_kind(declared):
    public = list(declared.cases())
    assert _rules.has_fresh(declared)
    where, case = _rules.fresh_case(declared, 12345, public)
    again_where, again = _rules.fresh_case(declared, 12345, public)
    assert where == again_where and all(_rules._same_input(case[k], again[k]) for k in case)  # rebuilt from the secret
    others = [_rules.fresh_case(declared, secret, public) for secret in (1, 2, 3)]
    assert any(not all(_rules._same_input(case[k], o[1][k]) for k in case) for o in others)  # new for other secrets
    if where >= 0:
        assert case.keys() == public[where].keys()
        assert {k: _kind(v) for k, v in case.items()} == {k: _kind(v) for k, v in public[where].items()}
        assert not all(_rules._same_input(case[k], public[where][k]) for k in case)  # not the public case
    else:  # declared fresh=: the public cases' parameters, new values
        assert case.keys() == public[0].keys()
        assert not any(all(_rules._same_input(case[k], p[k]) for k in case) for p in public)
    declared.reference(**_rules._cloned(case, declared.rules.keep_grad))  # a case the reference takes


def test_reseeding_leaves_torch_as_it_was():
    generator, seed = torch.Generator, torch.manual_seed
    with _rules.reseeded(7):
        a = torch.randn(3, generator=torch.Generator().manual_seed(1))
    assert torch.Generator is generator and torch.manual_seed is seed
    assert not torch.equal(a, torch.randn(3, generator=torch.Generator().manual_seed(1)))


def test_a_number_answered_exercise_draws_a_fresh_case_whose_answer_no_public_case_has():
    """1.4's accuracy is 0.0 on many draws of correlated keys, the same as the public tie case's: a table of the public
    answers with 0.0 (or any public answer) for an input it has not seen passed such a fresh case. Over 40 secrets the
    fresh case's answer is now none of the public answers, though untold draws repeat one."""
    from ttr_edu import hebbian
    from ttr_edu.checks.hebbian_memory import check_recall_accuracy

    declared = check_recall_accuracy.__exercise__
    public = list(declared.cases())
    answers = {hebbian.recall_accuracy(**case) for case in public}
    repeats = 0
    for secret in range(40):
        where, case = _rules.fresh_case(declared, secret, public)
        assert hebbian.recall_accuracy(**case) not in answers, (secret, where)
        drawn, differ = _rules._reseeded_cases(declared, secret, public)
        repeats += any(hebbian.recall_accuracy(**drawn[i]) in answers for i in differ)
    assert repeats > 0  # without the choice, some secrets could have drawn a repeated answer: the test can tell
