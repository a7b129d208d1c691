"""Chapter 01's checks accept a right answer, refuse the package's own implementation and reject plausible wrong
answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import pytest
import torch

from ttr_edu import hebbian
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import hebbian_memory as checks


def write(W, k, v):  # the solutions, written as a student would
    return W + torch.outer(v, k)


def store(keys, values):
    return values.T @ keys


def crosstalk_energy(keys):
    gram = keys @ keys.T
    return ((gram - torch.diag(torch.diagonal(gram))) ** 2).sum(dim=0).mean()


def recall_accuracy(W, keys, values):
    scores = (keys @ W.T) @ values.T
    others = scores.clone()
    others.fill_diagonal_(-torch.inf)
    return (torch.diagonal(scores) > others.max(dim=1).values).double().mean().item()


def cleanup_scores(keys, values):
    W = values.transpose(1, 2) @ keys
    return (keys @ W.transpose(1, 2)) @ values.transpose(1, 2)


def rival_score_variance(n, d):
    return 2 / d + (n - 2) / d**2


CHECKS = [
    (checks.check_write, write, hebbian.hebbian_write),
    (checks.check_store, store, hebbian.store),
    (checks.check_crosstalk_energy, crosstalk_energy, hebbian.crosstalk_energy),
    (checks.check_recall_accuracy, recall_accuracy, hebbian.recall_accuracy),
    (checks.check_cleanup_scores, cleanup_scores, hebbian.cleanup_scores),
    (checks.check_rival_score_variance, rival_score_variance, hebbian.rival_score_variance),
]


@pytest.mark.parametrize("check,solution,reference", CHECKS)
def test_a_right_answer_passes_and_the_packages_own_is_refused(check, solution, reference, capsys):
    assert check(solution) is True
    assert capsys.readouterr().out.startswith("PASS")
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation \(ttr_edu\.hebbian\."):
        check(lambda **arguments: reference(**arguments))  # a one-line call to the package's solution
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation"):
        check(reference)  # the package's function itself


def _crosstalk_with_diagonal(keys):
    return ((keys @ keys.T) ** 2).sum(dim=0).mean()


def _crosstalk_sum_not_mean(keys):
    gram = keys @ keys.T
    return ((gram - torch.diag(torch.diagonal(gram))) ** 2).sum()


def _crosstalk_unsquared_diagonal(keys):
    # Subtracts k_jᵀk_j instead of (k_jᵀk_j)²: the same numbers for unit keys, wrong for any other key.
    gram = keys @ keys.T
    return ((gram**2).sum() - torch.diagonal(gram).sum()) / len(keys)


def _accuracy_ties_pass(W, keys, values):
    scores = (keys @ W.T) @ values.T
    return (scores.argmax(dim=1) == torch.arange(len(keys))).double().mean().item()


def _accuracy_transposed_memory(W, keys, values):
    return hebbian.recall_accuracy(W, keys, values @ torch.eye(values.shape[1], dtype=values.dtype).flip(0))


WRONG = [
    ("write: transposed outer product", checks.check_write, lambda W, k, v: W + torch.outer(k, v).reshape(W.shape)),
    ("write: forgets the old memory", checks.check_write, lambda W, k, v: torch.outer(v, k)),
    (
        "store: keys and values swapped",
        checks.check_store,
        lambda keys, values: (keys.T @ values).reshape(values.shape[1], keys.shape[1]),
    ),
    ("store: only the last pair", checks.check_store, lambda keys, values: torch.outer(values[-1], keys[-1])),
    ("crosstalk: keeps the diagonal", checks.check_crosstalk_energy, _crosstalk_with_diagonal),
    ("crosstalk: sum instead of mean", checks.check_crosstalk_energy, _crosstalk_sum_not_mean),
    ("crosstalk: unsquared diagonal subtracted", checks.check_crosstalk_energy, _crosstalk_unsquared_diagonal),
    ("accuracy: ties counted as success", checks.check_recall_accuracy, _accuracy_ties_pass),
    ("accuracy: wrong values", checks.check_recall_accuracy, _accuracy_transposed_memory),
]


@pytest.mark.parametrize("label,check,wrong", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_answer_is_rejected_with_the_case(label, check, wrong):
    with pytest.raises(CheckFailed, match=r"inputs: "):
        check(wrong)


def test_a_crashing_answer_is_reported_with_its_case():
    with pytest.raises(CheckFailed, match=r"your function raised RuntimeError"):
        checks.check_write(lambda W, k, v: W + torch.outer(k, v))  # shapes (D_k, D_v) vs (D_v, D_k)


def _write_in_place(W, k, v):
    W += torch.outer(v, k)  # right values, but the exercise says: do not modify W
    return W


MORE_WRONG = [
    ("write: modifies W in place", checks.check_write, _write_in_place),
    ("store: mean instead of sum", checks.check_store, lambda keys, values: values.T @ keys / len(keys)),
    (
        "crosstalk: absolute values, not squares",
        checks.check_crosstalk_energy,
        lambda keys: ((keys @ keys.T) - torch.eye(len(keys), dtype=keys.dtype)).abs().sum(dim=0).mean(),
    ),
    (
        "crosstalk: mean over N - 1 others",
        checks.check_crosstalk_energy,
        lambda keys: hebbian.crosstalk_energy(keys) * len(keys) / max(len(keys) - 1, 1),
    ),
    (
        "accuracy: a tensor of per-pair hits, not the fraction",
        checks.check_recall_accuracy,
        lambda W, keys, values: ((keys @ W.T) @ values.T).argmax(dim=1) == torch.arange(len(keys)),
    ),
]


@pytest.mark.parametrize("label,check,wrong", MORE_WRONG, ids=[w[0] for w in MORE_WRONG])
def test_more_plausible_wrong_answers_are_rejected(label, check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)


def test_in_place_write_is_named_as_such():
    with pytest.raises(CheckFailed, match=r"modified its input W in place"):
        checks.check_write(_write_in_place)


def test_renamed_parameters_get_a_hint():
    with pytest.raises(CheckFailed, match=r"hint: keep the stub's parameter names.*write\(W, k, v\)"):
        checks.check_write(lambda memory, key, value: memory + torch.outer(value, key))


def test_a_check_without_cases_cannot_pass():
    from ttr_edu.checks import run_check

    with pytest.raises(ValueError, match="no cases"):
        run_check("empty", hebbian.store, hebbian.store, [])


def test_a_tensor_where_a_number_is_expected_is_a_clear_failure():
    with pytest.raises(CheckFailed, match=r"expected a single number like .*, got a tensor of shape \(4,\)"):
        checks.check_recall_accuracy(
            lambda W, keys, values: ((keys @ W.T) @ values.T).argmax(dim=1) == torch.arange(len(keys))
        )


SCORES_WRONG = [
    (
        "scores: transposed (row = stored value)",
        lambda keys, values: hebbian.cleanup_scores(keys, values).transpose(1, 2),
    ),
    ("scores: keys against keys", lambda keys, values: keys @ keys.transpose(1, 2)),
    (
        "scores: memories mixed across r",
        lambda keys, values: (keys @ (values.transpose(1, 2) @ keys).sum(0).T) @ values.transpose(1, 2),
    ),
]
VARIANCE_WRONG = [
    ("variance: the old √N/d argument", lambda n, d: n / d**2),
    ("variance: 2/d + N/d² (N − 2 not taken)", lambda n, d: 2 / d + n / d**2),
    ("variance: one 1/d term only", lambda n, d: 1 / d + (n - 2) / d**2),
    ("variance: the own score's (N − 1)/d²", lambda n, d: (n - 1) / d**2),
]


@pytest.mark.parametrize("label,wrong", SCORES_WRONG, ids=[w[0] for w in SCORES_WRONG])
def test_wrong_scores_are_rejected(label, wrong):
    with pytest.raises(CheckFailed, match="cleanup_scores"):
        checks.check_cleanup_scores(wrong)


@pytest.mark.parametrize("label,wrong", VARIANCE_WRONG, ids=[w[0] for w in VARIANCE_WRONG])
def test_wrong_variance_is_rejected(label, wrong):
    with pytest.raises(CheckFailed, match="rival_score_variance"):
        checks.check_rival_score_variance(wrong)


def test_the_tie_case_says_why_it_is_special():
    with pytest.raises(CheckFailed, match="every score ties"):
        checks.check_recall_accuracy(_accuracy_ties_pass)
