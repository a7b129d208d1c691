"""Chapter 01's checks accept a right answer, refuse the package's own implementation and reject plausible wrong
answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.checks.galleries import DTYPE_NAMED, accepted, ids, refused
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
    with pytest.raises(CheckFailed, match=r"asks for a Python float, your function returned a tensor of shape \(4,\)"):
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


# -- the galleries: plausible wrong answers, and right answers written differently ------------------------------------


def _scores(W, keys, values):
    return (keys @ W.T) @ values.T


def _strict_wins(scores):  # own score strictly above every rival's, per row
    others = scores.clone()
    others.fill_diagonal_(-math.inf)
    return torch.diagonal(scores) > others.max(dim=1).values


def _gram_off_diagonal(keys):
    gram = keys @ keys.T
    return gram - torch.diag(torch.diagonal(gram))


def _accuracy_by_cosine(W, keys, values):  # clean-up by angle: the same winner only when all values have one length
    y = F.normalize(keys @ W.T, dim=-1)
    return _strict_wins(y @ F.normalize(values, dim=-1).T).double().mean().item()


def _accuracy_by_distance(W, keys, values):  # the nearest value by Euclidean distance
    distances = torch.cdist(keys @ W.T, values)
    others = distances.clone()
    others.fill_diagonal_(math.inf)
    return (torch.diagonal(distances) < others.min(dim=1).values).double().mean().item()


def _accuracy_at_least(W, keys, values):  # >= lets a tie win
    scores = _scores(W, keys, values)
    others = scores.clone()
    others.fill_diagonal_(-math.inf)
    return (torch.diagonal(scores) >= others.max(dim=1).values).double().mean().item()


def _scores_by_loop(keys, values):  # right values, one memory at a time
    return torch.stack([(K @ (V.T @ K).T) @ V.T for K, V in zip(keys, values)])


def _store_by_loop(keys, values):  # right values, one pair at a time
    return sum(torch.outer(v, k) for k, v in zip(keys, values))


WRONG_ANSWERS = [
    ("1.1 modifies W in place", checks.check_write, _write_in_place, "modified its input W in place"),
    ("1.1 forgets the old memory", checks.check_write, lambda W, k, v: torch.outer(v, k), "wrong values"),
    ("1.1 divides by ‖k‖²", checks.check_write, lambda W, k, v: W + torch.outer(v, k) / (k @ k), "wrong values"),
    (
        "1.2 a Python loop over the pairs",
        checks.check_store,
        _store_by_loop,
        "torch operations at N = 4 and .* a Python loop over the pairs",
    ),
    ("1.2 divided by N", checks.check_store, lambda keys, values: values.T @ keys / len(keys), "wrong values"),
    ("1.2 keys and values swapped", checks.check_store, lambda keys, values: keys.T @ values, "wrong shape"),
    ("1.3 keeps the diagonal", checks.check_crosstalk_energy, _crosstalk_with_diagonal, "wrong values"),
    ("1.3 subtracts the unsquared diagonal", checks.check_crosstalk_energy, _crosstalk_unsquared_diagonal, "wrong"),
    (
        "1.3 mean over the N − 1 others",
        checks.check_crosstalk_energy,
        lambda keys: (_gram_off_diagonal(keys) ** 2).sum() / max(len(keys) - 1, 1),
        "wrong values",
    ),
    (
        "1.3 upper triangle only",
        checks.check_crosstalk_energy,
        lambda keys: ((keys @ keys.T).triu(1) ** 2).sum() / len(keys),
        "wrong values",
    ),
    (
        "1.3 subtracts N (assumes unit keys)",
        checks.check_crosstalk_energy,
        lambda keys: (((keys @ keys.T) ** 2).sum() - len(keys)) / len(keys),
        "wrong values",
    ),
    (
        "1.3 mean over all N² entries",
        checks.check_crosstalk_energy,
        lambda keys: (_gram_off_diagonal(keys) ** 2).sum() / len(keys) ** 2,
        "wrong values",
    ),
    (
        "1.3 a Python float (.item())",
        checks.check_crosstalk_energy,
        lambda keys: ((_gram_off_diagonal(keys) ** 2).sum() / len(keys)).item(),
        "expected a plain torch.Tensor, got float",
    ),
    (
        "1.3 cosines instead of dot products",
        checks.check_crosstalk_energy,
        lambda keys: (_gram_off_diagonal(F.normalize(keys, dim=-1)) ** 2).sum() / len(keys),
        "wrong values",
    ),
    ("1.4 argmax (a tie counts as a win)", checks.check_recall_accuracy, _accuracy_ties_pass, "every score ties"),
    ("1.4 >= instead of >", checks.check_recall_accuracy, _accuracy_at_least, "every score ties"),
    (
        "1.4 transposed score matrix",
        checks.check_recall_accuracy,
        lambda W, keys, values: _strict_wins(_scores(W, keys, values).T).double().mean().item(),
        "got .*, expected",
    ),
    (
        "1.4 a 0-d tensor, not a Python float",
        checks.check_recall_accuracy,
        lambda W, keys, values: _strict_wins(_scores(W, keys, values)).double().mean(),
        r"asks for a Python float, your function returned a tensor of shape \(\)",
    ),
    ("1.4 cosine similarity", checks.check_recall_accuracy, _accuracy_by_cosine, "values have different lengths"),
    ("1.4 Euclidean nearest value", checks.check_recall_accuracy, _accuracy_by_distance, "different lengths"),
    (
        "1.5a transposed [r, i, j]",
        checks.check_cleanup_scores,
        lambda keys, values: ((keys @ (values.transpose(1, 2) @ keys).transpose(1, 2)) @ values.transpose(1, 2)).mT,
        "wrong values",
    ),
    (
        "1.5a a Python loop over the memories",
        checks.check_cleanup_scores,
        _scores_by_loop,
        "torch operations at R = 2 and .* a Python loop over the memories",
    ),
    (
        "1.5a (VVᵀ)(KKᵀ), the transpose",
        checks.check_cleanup_scores,
        lambda keys, values: (values @ values.transpose(1, 2)) @ (keys @ keys.transpose(1, 2)),
        "wrong values",
    ),
    ("1.5b N/d²", checks.check_rival_score_variance, lambda n, d: n / d**2, "got .*, expected"),
    ("1.5b 2/d + (N−1)/d²", checks.check_rival_score_variance, lambda n, d: 2 / d + (n - 1) / d**2, "got"),
    ("1.5b 1/d + (N−1)/d²", checks.check_rival_score_variance, lambda n, d: 1 / d + (n - 1) / d**2, "got"),
    (
        "1.5b the standard deviation",
        checks.check_rival_score_variance,
        lambda n, d: math.sqrt(2 / d + (n - 2) / d**2),
        "got",
    ),
    ("1.5b 2/d + N/d²", checks.check_rival_score_variance, lambda n, d: 2 / d + n / d**2, "got"),
    ("1.5b the own score's (N−1)/d²", checks.check_rival_score_variance, lambda n, d: (n - 1) / d**2, "got"),
    (
        "1.5b a 0-d tensor, not a float",
        checks.check_rival_score_variance,
        lambda n, d: torch.tensor(2 / d + (n - 2) / d**2, dtype=torch.float64),
        "asks for a Python float, your function returned a tensor",
    ),
    (
        "1.5a computed in float32, returned in float64",
        checks.check_cleanup_scores,
        lambda keys, values: ((keys.float() @ keys.float().mT) @ (values.float() @ values.float().mT).mT).to(
            keys.dtype
        ),
        "every value in it is a float32 number, within float32.s rounding of the reference: it was computed in float32",
    ),
]


@pytest.mark.parametrize("label,check,answer,reason", WRONG_ANSWERS, ids=ids(WRONG_ANSWERS))
def test_a_plausible_wrong_answer_is_refused_for_its_reason(label, check, answer, reason, capsys):
    refused(check, answer, reason, capsys)


def _crosstalk_by_loop(keys):  # no loop is ruled out here
    n = len(keys)
    pairs = ((keys[i] @ keys[j]) ** 2 for i in range(n) for j in range(n) if i != j)
    return sum(pairs, keys.new_zeros(())) / n


def _accuracy_by_loop(W, keys, values):
    hits = 0
    for j in range(len(keys)):
        scores = values @ (W @ keys[j])
        hits += bool(all(scores[j] > scores[i] for i in range(len(keys)) if i != j))
    return hits / len(keys)


RIGHT_VARIANTS = [
    ("1.1 outer(k, v) transposed", checks.check_write, lambda W, k, v: W + torch.outer(k, v).T, None),
    ("1.1 an einsum", checks.check_write, lambda W, k, v: W + torch.einsum("i, j -> i j", v, k), None),
    ("1.1 in float32", checks.check_write, lambda W, k, v: (W + torch.outer(v, k)).float(), DTYPE_NAMED),
    ("1.2 an einsum", checks.check_store, lambda keys, values: torch.einsum("n k, n v -> v k", keys, values), None),
    ("1.2 (KᵀV)ᵀ", checks.check_store, lambda keys, values: (keys.T @ values).T, None),
    (
        "1.3 squared sums minus the diagonal",
        checks.check_crosstalk_energy,
        lambda keys: (((keys @ keys.T) ** 2).sum() - (torch.diagonal(keys @ keys.T) ** 2).sum()) / len(keys),
        None,
    ),
    ("1.3 a double loop", checks.check_crosstalk_energy, _crosstalk_by_loop, None),
    ("1.4 a loop over the keys", checks.check_recall_accuracy, _accuracy_by_loop, None),
    (
        "1.5a (KKᵀ)(VVᵀ)",
        checks.check_cleanup_scores,
        lambda keys, values: (keys @ keys.transpose(1, 2)) @ (values @ values.transpose(1, 2)),
        None,
    ),
    (
        "1.5a an einsum",
        checks.check_cleanup_scores,
        lambda keys, values: torch.einsum("r j k, r l k, r l v, r i v -> r j i", keys, keys, values, values),
        None,
    ),
    ("1.5b one fraction", checks.check_rival_score_variance, lambda n, d: (2 * d + n - 2) / d**2, None),
    ("1.5b a NumPy float", checks.check_rival_score_variance, lambda n, d: np.float64(2 / d + (n - 2) / d**2), None),
]


@pytest.mark.parametrize("label,check,answer,expected", RIGHT_VARIANTS, ids=ids(RIGHT_VARIANTS))
def test_a_right_answer_written_differently_passes(label, check, answer, expected, capsys):
    accepted(check, answer, expected, capsys)
