"""Chapter 06's checks accept a correct answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import pytest
import torch

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import test_time_regression_parametric as checks


# Correct answers, written the way a student would (as in the solutions notebook).
def decay_weights(g):
    T = g.shape[0]
    G = torch.cumsum(g, 0)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return (G[:, None] - G[None, :]).masked_fill(~causal, float("-inf")).exp()


def sweep_operator(k, beta):
    M = torch.eye(k.shape[1], dtype=k.dtype)
    for t in range(k.shape[0]):
        M = (torch.eye(k.shape[1], dtype=k.dtype) - beta[t] * torch.outer(k[t], k[t])) @ M
    return M


def sweep_operator_by_sgd_steps(k, beta):  # the columns of M are the errors left from the identity, one pass each
    E = torch.eye(k.shape[1], dtype=k.dtype)
    for t in range(k.shape[0]):
        E = E - beta[t] * torch.outer(k[t], k[t] @ E)
    return E


def sweep_operator_reversed(k, beta):  # the first pair's factor leftmost: the transpose
    return sweep_operator(k.flip(0), beta.flip(0))


def sweep_operator_first_order(k, beta):  # I − Σ β_t k_t k_tᵀ: the products of the factors dropped
    return torch.eye(k.shape[1], dtype=k.dtype) - (beta[:, None] * k).T @ k


def sweep_operator_normalised(k, beta):  # Kaczmarz's step β/‖k‖², not the exercise's β
    return sweep_operator(k, beta / (k * k).sum(1))


def ridge_readout(q, k, v, ridge):
    out = []
    for t in range(k.shape[0]):
        K, V = k[: t + 1], v[: t + 1]
        S = torch.linalg.solve(K.T @ K + ridge * torch.eye(k.shape[1], dtype=k.dtype), K.T @ V)
        out.append(S.T @ q[t])
    return torch.stack(out)


CHECKS = [
    (checks.check_decay_weights, decay_weights),
    (checks.check_sweep_operator, sweep_operator),
    (checks.check_sweep_operator, sweep_operator_by_sgd_steps),
    (checks.check_ridge_readout, ridge_readout),
]


@pytest.mark.parametrize("check,answer", CHECKS)
def test_a_correct_answer_passes(check, answer, capsys):
    assert check(answer) is True
    assert capsys.readouterr().out.startswith("PASS")


def decay_including_own_gate(g):  # Σ_{j=i..t} instead of Σ_{j=i+1..t}: the newest pair is already decayed
    return decay_weights(g) * torch.exp(g)[None, :]


def linear_attention_readout(q, k, v, ridge):  # the covariance dropped: what linear attention computes
    return torch.stack([sum((q[t] @ k[i]) * v[i] for i in range(t + 1)) for t in range(k.shape[0])])


def non_causal_readout(q, k, v, ridge):  # solved once with every pair, future ones included
    S = torch.linalg.solve(k.T @ k + ridge * torch.eye(k.shape[1], dtype=k.dtype), k.T @ v)
    return q @ S


def pseudo_inverse_readout(q, k, v, ridge):  # the ridge ignored: minimum-norm fit by the pseudo-inverse
    return torch.stack([(torch.linalg.pinv(k[: t + 1]) @ v[: t + 1]).T @ q[t] for t in range(k.shape[0])])


WRONG = [
    ("sweep: first order, products dropped", checks.check_sweep_operator, sweep_operator_first_order),
    ("sweep: steps normalised by ‖k‖²", checks.check_sweep_operator, sweep_operator_normalised),
    ("sweep: the identity", checks.check_sweep_operator, lambda k, beta: torch.eye(k.shape[1], dtype=k.dtype)),
    ("ridge: ridge ignored (pseudo-inverse)", checks.check_ridge_readout, pseudo_inverse_readout),
    ("decay: includes the pair's own gate", checks.check_decay_weights, decay_including_own_gate),
    (
        "decay: upper triangle not masked",
        checks.check_decay_weights,
        lambda g: (torch.cumsum(g, 0)[:, None] - torch.cumsum(g, 0)[None, :]).exp(),
    ),
    ("ridge: covariance ignored", checks.check_ridge_readout, linear_attention_readout),
    ("ridge: not causal", checks.check_ridge_readout, non_causal_readout),
]


@pytest.mark.parametrize("label,check,wrong", WRONG, ids=[w[0] for w in WRONG])
def test_plausible_wrong_answers_are_rejected(label, check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)


def test_the_reversed_product_is_named():
    with pytest.raises(CheckFailed, match="transpose of the pass's: the factors are in reverse order"):
        checks.check_sweep_operator(sweep_operator_reversed)


def test_the_sweep_operator_is_what_a_pass_of_sgd_does_to_the_error():
    # The chapter's reason for it: with consistent targets, one pass of the package's SGD multiplies the error by M.
    from ttr_edu.regression import Linear, MultiPassSGD, TestTimeRegression, Uniform

    g = torch.Generator().manual_seed(0)
    k, W = torch.randn(6, 8, generator=g, dtype=torch.float64), torch.randn(8, 3, generator=g, dtype=torch.float64)
    beta = 0.3 + 0.2 * torch.rand(6, generator=g, dtype=torch.float64)
    sgd = TestTimeRegression(Uniform(), Linear(), MultiPassSGD(2))
    _, S = sgd(
        k[None, :, None],
        k[None, :, None],
        (k @ W)[None, :, None],
        beta=beta[None, :, None],
        scale=1.0,
        output_final_state=True,
    )
    M = sweep_operator(k, beta)
    torch.testing.assert_close(S[0, 0] - W, M @ M @ (-W))


def decay_masked_after_exp(g):  # the exponential first, then the mask: inf · 0 = NaN under a strong decay
    T = g.shape[0]
    G = torch.cumsum(g, 0)
    return (G[:, None] - G[None, :]).exp() * torch.ones(T, T, dtype=g.dtype).tril()


def test_masking_after_the_exponential_is_caught_with_the_reason():
    with pytest.raises(CheckFailed, match=r"strong decay.*inf · 0 = NaN"):
        checks.check_decay_weights(decay_masked_after_exp)


def test_the_strong_decay_case_really_makes_the_mask_after_exp_nan():
    assert torch.isnan(decay_masked_after_exp(torch.full((30,), -50.0, dtype=torch.float64))).any()


def test_torch_where_after_exp_passes():  # masking after exp without multiplying keeps zeros: a correct answer
    def answer(g):
        T = g.shape[0]
        G = torch.cumsum(g, 0)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return torch.where(causal, (G[:, None] - G[None, :]).exp(), torch.zeros(()))

    assert checks.check_decay_weights(answer) is True


def test_the_decay_check_gives_one_verdict_for_all_its_cases(capsys):
    # Review: the student saw "PASS decay_weights" and then a second verdict for the strong case.
    def answer(g):  # written as a student would: segment sums, masked before exp
        T = g.shape[0]
        G = torch.cumsum(g, 0)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return (G[:, None] - G[None, :]).masked_fill(~causal, float("-inf")).exp()

    assert checks.check_decay_weights(answer) is True
    out = capsys.readouterr().out
    assert out.count("PASS") == 1 and "6 random cases" in out


# --- Exercise 6.4: RLS from scratch (Sherman–Morrison) -----------------------------------------------------------


def rls_memory(k, v, ridge):
    D_k = k.shape[1]
    P, S = torch.eye(D_k, dtype=k.dtype) / ridge, torch.zeros(D_k, v.shape[1], dtype=k.dtype)
    for t in range(k.shape[0]):
        Pk = P @ k[t]
        P = P - torch.outer(Pk, Pk) / (1 + k[t] @ Pk)
        S = S + torch.outer(P @ k[t], v[t] - S.T @ k[t])
    return S


def _rls_variant(*, p0="inverse", sign=-1.0, one_plus=True, gain="new", error_after=False):
    def answer(k, v, ridge):
        D_k = k.shape[1]
        eye = torch.eye(D_k, dtype=k.dtype)
        P = eye / ridge if p0 == "inverse" else (ridge * eye if p0 == "ridge" else eye)
        S = torch.zeros(D_k, v.shape[1], dtype=k.dtype)
        for t in range(k.shape[0]):
            old = P
            Pk = P @ k[t]
            P = P + sign * torch.outer(Pk, Pk) / ((1 if one_plus else 0) + k[t] @ Pk)
            g = (P if gain == "new" else old) @ k[t]
            if error_after:  # the error read from the memory after this step's write
                S = S + torch.outer(g, v[t])
                S = S - torch.outer(g, S.T @ k[t])
            else:
                S = S + torch.outer(g, v[t] - S.T @ k[t])
        return S

    return answer


def rls_by_solve(k, v, ridge):  # right values, but the exercise asks for the recursion
    return torch.linalg.solve(k.T @ k + ridge * torch.eye(k.shape[1], dtype=k.dtype), k.T @ v)


def rls_transposed(k, v, ridge):  # the papers' W = Sᵀ, (D_v, D_k)
    return rls_memory(k, v, ridge).T


RLS_WRONG = [
    ("P_0 = λ I instead of I / λ", _rls_variant(p0="ridge")),
    ("P_0 = I, the ridge forgotten", _rls_variant(p0="identity")),
    ("Sherman–Morrison with a plus sign", _rls_variant(sign=+1.0)),
    ("denominator kᵀPk without the 1 +", _rls_variant(one_plus=False)),
    ("gain from the old P without the denominator", _rls_variant(gain="old")),
    ("error read after the write", _rls_variant(error_after=True)),
    ("the memory transposed", rls_transposed),
]


def test_rls_check_passes_the_recursion(capsys):
    assert checks.check_rls_memory(rls_memory) is True
    assert capsys.readouterr().out.startswith("PASS rls_memory")


@pytest.mark.parametrize("label,wrong", RLS_WRONG, ids=[w[0] for w in RLS_WRONG])
def test_rls_check_rejects_plausible_wrong_recursions(label, wrong):
    with pytest.raises(CheckFailed, match="rls_memory"):
        checks.check_rls_memory(wrong)


def test_rls_check_rejects_a_linear_solve():
    with pytest.raises(CheckFailed, match="ForbiddenCall: torch.linalg.solve is ruled out here"):
        checks.check_rls_memory(rls_by_solve)
