"""Chapter 04's checks accept a right answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import math

import pytest
import torch

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import delta_rule as checks
from ttr_edu.ops import delta_rule_recurrent, linear_attention_recurrent


def step(S, k, v, beta):
    return S + beta * torch.outer(k, v - S.T @ k)


def sum_rule_step(S, k, v, beta):  # no error correction
    return S + beta * torch.outer(k, v)


def step_without_beta_on_the_old_value(S, k, v, beta):
    return S + torch.outer(k, beta * v - S.T @ k)


def eigenvalues(k, beta):
    return torch.sort(torch.cat([(1 - beta * k @ k).reshape(1), torch.ones(len(k) - 1, dtype=k.dtype)])).values


def eigenvalues_forgetting_the_norm(k, beta):  # right only for unit keys
    return torch.sort(
        torch.cat([torch.tensor([1 - beta], dtype=k.dtype), torch.ones(len(k) - 1, dtype=k.dtype)])
    ).values


def eigenvalues_of_the_write(k, beta):  # eigenvalues of β k kᵀ, forgetting the I −
    return torch.sort(torch.cat([(beta * k @ k).reshape(1), torch.zeros(len(k) - 1, dtype=k.dtype)])).values


def pseudo_values(k, v, beta):
    S = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype)
    u = []
    for t in range(len(k)):
        u.append(beta[t] * (v[t] - S.T @ k[t]))
        S = S + torch.outer(k[t], u[-1])
    return torch.stack(u)


def pseudo_values_after_the_write(k, v, beta):  # reads S_t instead of S_{t−1}
    S = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype)
    u = []
    for t in range(len(k)):
        S = S + beta[t] * torch.outer(k[t], v[t] - S.T @ k[t])
        u.append(beta[t] * (v[t] - S.T @ k[t]))
    return torch.stack(u)


def raw_errors(k, v, beta):  # forgets β
    return pseudo_values(k, v, beta) / beta[:, None]


def predicted_norm_by_the_recursion(b, D, D_v, T):
    ratio, energy = 1 + (b * b - 2 * b) / D, 0.0
    for _ in range(T):
        energy = ratio * energy + b * b * D_v
    return math.sqrt(energy)


def predicted_norm_in_closed_form(b, D, D_v, T):  # the geometric series, with b = 2 as a case of its own
    ratio = 1 + (b * b - 2 * b) / D
    return math.sqrt(b * b * D_v * (T if ratio == 1 else (ratio**T - 1) / (ratio - 1)))


def predicted_norm_as_a_tensor(b, D, D_v, T):
    return torch.tensor(predicted_norm_in_closed_form(b, D, D_v, T), dtype=torch.float64)


def predicted_norm_without_the_sphere(b, D, D_v, T):  # E‖Sᵀk‖² taken as ‖S‖², forgetting E[k kᵀ] = I/D
    return predicted_norm_by_the_recursion(b, 1, D_v, T)


def predicted_norm_without_the_cross_term_sign(b, D, D_v, T):  # (1 − b/D)² for the old memory: only its k part shrinks
    ratio, energy = (1 - b / D) ** 2, 0.0
    for _ in range(T):
        energy = ratio * energy + b * b * D_v
    return math.sqrt(energy)


def predicted_energy(b, D, D_v, T):  # E‖S_T‖², not its square root
    return predicted_norm_by_the_recursion(b, D, D_v, T) ** 2


def predicted_norm_one_write_late(b, D, D_v, T):
    return predicted_norm_by_the_recursion(b, D, D_v, T - 1)


def predicted_norm_failing_at_the_edge(b, D, D_v, T):  # the series without its b = 2 case divides by zero
    ratio = 1 + (b * b - 2 * b) / D
    return math.sqrt(b * b * D_v * (ratio**T - 1) / (ratio - 1))


RIGHT = [
    (checks.check_delta_rule_step, step),
    (checks.check_update_eigenvalues, eigenvalues),
    (checks.check_pseudo_values, pseudo_values),
    (checks.check_predicted_memory_norm, predicted_norm_by_the_recursion),
    (checks.check_predicted_memory_norm, predicted_norm_in_closed_form),
    (checks.check_predicted_memory_norm, predicted_norm_as_a_tensor),
]
WRONG = [
    (checks.check_delta_rule_step, sum_rule_step),
    (checks.check_delta_rule_step, step_without_beta_on_the_old_value),
    (checks.check_update_eigenvalues, eigenvalues_forgetting_the_norm),
    (checks.check_update_eigenvalues, eigenvalues_of_the_write),
    (checks.check_pseudo_values, pseudo_values_after_the_write),
    (checks.check_pseudo_values, raw_errors),
]


WRONG_PREDICTIONS = [
    predicted_norm_without_the_sphere,
    predicted_norm_without_the_cross_term_sign,
    predicted_energy,
    predicted_norm_one_write_late,
    predicted_norm_failing_at_the_edge,
]


@pytest.mark.parametrize("answer", WRONG_PREDICTIONS)
def test_a_wrong_prediction_of_the_memory_size_is_rejected(answer):
    with pytest.raises(CheckFailed, match="expected|raised ZeroDivisionError"):
        checks.check_predicted_memory_norm(answer)


@pytest.mark.parametrize("check,answer", RIGHT)
def test_right_answer_passes(check, answer, capsys):
    assert check(answer) is True
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("check,answer", WRONG)
def test_wrong_answer_is_rejected(check, answer):
    with pytest.raises(CheckFailed, match="wrong values"):
        check(answer)


def test_pseudo_values_turn_linear_attention_into_the_delta_rule():
    # The chapter's claim: linear attention over the pseudo-values is the delta rule.
    g = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(12, 4, generator=g, dtype=torch.float64), dim=-1) for _ in "qk")
    v, beta = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.rand(12, generator=g, dtype=torch.float64)
    u = pseudo_values(k, v, beta)
    linear, _ = linear_attention_recurrent(q[None, :, None], k[None, :, None], u[None, :, None], scale=1.0)
    delta, _ = delta_rule_recurrent(
        q[None, :, None], k[None, :, None], v[None, :, None], beta[None, :, None], scale=1.0
    )
    torch.testing.assert_close(linear, delta)


def _eigenvalues_by_eigensolver(k, beta):  # right values, but the exercise asks for the derivation
    return torch.linalg.eigvalsh(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))


def _eigenvalues_by_svd(k, beta):  # singular values are |eigenvalues|: wrong past β‖k‖² > 1, and ruled out anyway
    return torch.sort(torch.linalg.svdvals(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))).values


def _eigenvalues_by_tensor_method(k, beta):  # the same eigensolver spelled as a method, through torch.ops
    return torch.ops.aten._linalg_eigh(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))[0]


def _eigenvalues_by_numpy(k, beta):
    import numpy as np

    return torch.from_numpy(np.linalg.eigvalsh((torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k)).numpy()))


def _eigenvalues_by_a_bound_name(k, beta, eigvalsh=torch.linalg.eigvalsh):  # bound before the check ran
    return eigvalsh(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))


@pytest.mark.parametrize(
    "answer,what",
    [
        (_eigenvalues_by_eigensolver, "an eigensolver"),
        (_eigenvalues_by_svd, "a singular value decomposition"),
        (_eigenvalues_by_tensor_method, "an eigensolver"),
        (_eigenvalues_by_numpy, "numpy.linalg.eigvalsh"),
        (_eigenvalues_by_a_bound_name, "an eigensolver"),
    ],
)
def test_an_eigensolver_does_not_pass_the_derivation_exercise(answer, what, capsys):
    # Review: 4.2 accepted torch.linalg.eigvalsh, which the text forbids; any spelling of it is refused by what runs.
    with pytest.raises(CheckFailed, match=f"update_eigenvalues: your function (used|called) {what}.*rules out: derive"):
        checks.check_update_eigenvalues(answer)
    assert "PASS" not in capsys.readouterr().out
    # The block is lifted afterwards: the reference and everyone else still have their eigensolver.
    assert torch.linalg.eigvalsh(torch.eye(2, dtype=torch.float64)).tolist() == [1.0, 1.0]
