"""Chapter 07's checks accept a correct answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import pytest
import torch

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import test_time_regression_nonparametric as checks


def causal_softmax(logits):
    T = logits.shape[0]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1)


# Correct answers, written the way a student would (as in the solutions notebook).
def nadaraya_watson(q, k, v, bandwidth):
    squared_distance = ((q[:, None, :] - k[None, :, :]) ** 2).sum(-1)  # (T, T)
    return causal_softmax(-squared_distance / (2 * bandwidth**2)) @ v


def local_linear_readout(q, k, v, scale, ridge):
    w = causal_softmax(scale * q @ k.T)
    out = []
    for t in range(k.shape[0]):
        w_t = w[t, : t + 1, None]
        K, V = k[: t + 1], v[: t + 1]
        k_bar, v_bar = (w_t * K).sum(0), (w_t * V).sum(0)
        cov_kk = (K - k_bar).T @ (w_t * (K - k_bar)) + ridge * torch.eye(k.shape[1], dtype=k.dtype)
        cov_vk = (V - v_bar).T @ (w_t * (K - k_bar))
        out.append(v_bar + cov_vk @ torch.linalg.solve(cov_kk, q[t] - k_bar))
    return torch.stack(out)


CHECKS = [
    (checks.check_nadaraya_watson, nadaraya_watson),
    (checks.check_local_linear_readout, local_linear_readout),
]


@pytest.mark.parametrize("check,answer", CHECKS)
def test_a_correct_answer_passes(check, answer, capsys):
    assert check(answer) is True
    assert capsys.readouterr().out.startswith("PASS")


def softmax_attention_as_smoother(q, k, v, bandwidth):  # exp(q·k/h²): Gaussian only if all keys had one norm
    return causal_softmax(q @ k.T / bandwidth**2) @ v


def non_causal_smoother(q, k, v, bandwidth):
    squared_distance = ((q[:, None, :] - k[None, :, :]) ** 2).sum(-1)
    return torch.softmax(-squared_distance / (2 * bandwidth**2), dim=-1) @ v


def local_constant(q, k, v, scale, ridge):  # v̄ alone: the slope term forgotten
    return causal_softmax(scale * q @ k.T) @ v


def uncentred_moments(q, k, v, scale, ridge):  # Σ w k kᵀ and Σ w v kᵀ without subtracting the means
    w = causal_softmax(scale * q @ k.T)
    out = []
    for t in range(k.shape[0]):
        w_t = w[t, : t + 1, None]
        K, V = k[: t + 1], v[: t + 1]
        k_bar, v_bar = (w_t * K).sum(0), (w_t * V).sum(0)
        second_kk = K.T @ (w_t * K) + ridge * torch.eye(k.shape[1], dtype=k.dtype)
        out.append(v_bar + (V.T @ (w_t * K)) @ torch.linalg.solve(second_kk, q[t] - k_bar))
    return torch.stack(out)


def bandwidth_without_half(q, k, v, bandwidth):  # exp(-‖q - k‖² / h²): the ½ of the Gaussian forgotten
    squared_distance = ((q[:, None, :] - k[None, :, :]) ** 2).sum(-1)
    return causal_softmax(-squared_distance / bandwidth**2) @ v


WRONG = [
    ("NW: the ½ in exp(-d²/2h²) forgotten", checks.check_nadaraya_watson, bandwidth_without_half),
    ("NW: dot-product (softmax) kernel", checks.check_nadaraya_watson, softmax_attention_as_smoother),
    ("NW: not causal", checks.check_nadaraya_watson, non_causal_smoother),
    ("local linear: slope forgotten", checks.check_local_linear_readout, local_constant),
    ("local linear: moments not centred", checks.check_local_linear_readout, uncentred_moments),
]


@pytest.mark.parametrize("label,check,wrong", WRONG, ids=[w[0] for w in WRONG])
def test_plausible_wrong_answers_are_rejected(label, check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)
