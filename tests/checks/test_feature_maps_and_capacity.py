"""Chapter 03's checks accept a right answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import math

import pytest
import torch

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import feature_maps_and_capacity as checks
from ttr_edu.models.retrieval import sum_rule_retrieve


def dpfp(x, nu):
    r = torch.cat([torch.relu(x), torch.relu(-x)], dim=-1)
    return torch.cat([r * torch.roll(r, j, dims=-1) for j in range(1, nu + 1)], dim=-1)


def dpfp_from_zero(x, nu):  # j = 0..ν−1: the first block is r ⊙ r
    r = torch.cat([torch.relu(x), torch.relu(-x)], dim=-1)
    return torch.cat([r * torch.roll(r, j, dims=-1) for j in range(nu)], dim=-1)


def dpfp_positive_half_only(x, nu):  # forgets ReLU(−x): half the features
    r = torch.relu(x)
    return torch.cat([r * torch.roll(r, j, dims=-1) for j in range(1, nu + 1)], dim=-1)


def dpfp_roll_without_dims(x, nu):  # torch.roll without dims=-1 rolls the flattened tensor across rows
    r = torch.cat([torch.relu(x), torch.relu(-x)], dim=-1)
    return torch.cat([r * torch.roll(r, j) for j in range(1, nu + 1)], dim=-1)


def favor_plus(x, projection):
    wx = x @ projection.T
    scale = torch.exp(-0.5 * (x**2).sum(-1, keepdim=True)) / math.sqrt(2 * projection.shape[0])
    return scale * torch.cat([torch.exp(wx), torch.exp(-wx)], dim=-1)


def favor_plus_without_norm_term(x, projection):
    wx = x @ projection.T
    return torch.cat([torch.exp(wx), torch.exp(-wx)], dim=-1) / math.sqrt(2 * projection.shape[0])


def favor_plus_sqrt_m(x, projection):  # √m instead of √(2m)
    return favor_plus(x, projection) * math.sqrt(2)


def loss(y, target):
    return 0.5 * ((y - torch.nn.functional.one_hot(target, y.shape[1]).to(y.dtype)) ** 2).sum(-1).mean()


def loss_mean_over_values(y, target):  # averages over D_v too
    return 0.5 * ((y - torch.nn.functional.one_hot(target, y.shape[1]).to(y.dtype)) ** 2).mean()


def loss_without_half(y, target):
    return 2 * loss(y, target)


RIGHT = [(checks.check_dpfp, dpfp), (checks.check_favor_plus, favor_plus), (checks.check_retrieval_loss, loss)]
WRONG = [
    (checks.check_dpfp, dpfp_from_zero, "wrong values"),
    (checks.check_dpfp, dpfp_positive_half_only, "wrong shape"),
    (checks.check_dpfp, dpfp_roll_without_dims, "wrong values"),
    (checks.check_favor_plus, favor_plus_without_norm_term, "wrong values"),
    (checks.check_favor_plus, favor_plus_sqrt_m, "wrong values"),
    (checks.check_retrieval_loss, loss_mean_over_values, "got"),
    (checks.check_retrieval_loss, loss_without_half, "got"),
]


@pytest.mark.parametrize("check,answer", RIGHT)
def test_right_answer_passes(check, answer, capsys):
    assert check(answer) is True
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("check,answer,words", WRONG)
def test_wrong_answer_is_rejected(check, answer, words):
    with pytest.raises(CheckFailed, match=words):
        check(answer)


def _sum_rule(phi_k, v, phi_q):  # the solution, written as a student would
    S = torch.einsum("btk,btv->bkv", phi_k, v)
    z = phi_k.sum(1)
    return torch.einsum("bkv,bk->bv", S, phi_q) / (torch.einsum("bk,bk->b", z, phi_q)[:, None] + 1e-6)


def test_sum_rule_check_passes_a_right_answer_and_refuses_the_packages_own(capsys):

    assert checks.check_sum_rule_retrieve(_sum_rule) is True
    assert capsys.readouterr().out.startswith("PASS")
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation"):
        checks.check_sum_rule_retrieve(sum_rule_retrieve)


def _no_normaliser(phi_k, v, phi_q):
    return torch.einsum("btk,btv,bk->bv", phi_k, v, phi_q)


def _normaliser_without_eps(phi_k, v, phi_q):  # harmless ε forgotten? no: 1e-6 is above this check's tolerance
    return _no_normaliser(phi_k, v, phi_q) / torch.einsum("btk,bk->b", phi_k, phi_q)[:, None]


def _mean_not_sum(phi_k, v, phi_q):
    return torch.einsum("btk,btv,bk->bv", phi_k, v, phi_q) / phi_k.shape[1]


def _read_with_the_last_key(phi_k, v, phi_q):
    return _no_normaliser(phi_k, v, phi_k[:, -1]) / (torch.einsum("btk,bk->b", phi_k, phi_k[:, -1])[:, None] + 1e-6)


@pytest.mark.parametrize("wrong", [_no_normaliser, _normaliser_without_eps, _mean_not_sum, _read_with_the_last_key])
def test_sum_rule_check_rejects_plausible_wrong_answers(wrong):
    with pytest.raises(CheckFailed, match="sum_rule_retrieve"):
        checks.check_sum_rule_retrieve(wrong)


def test_a_sum_rule_without_eps_is_told_so():
    # Review: the answer without ε was refused with "got -0.1828823, expected -0.1828822", which reads as rounding.
    with pytest.raises(CheckFailed, match=r"without ε: the denominator is zᵀφ\(q\) \+ 1e-6"):
        checks.check_sum_rule_retrieve(_normaliser_without_eps)


def test_a_sum_rule_with_another_eps_is_refused_without_the_note():
    def other_eps(phi_k, v, phi_q):  # ε = 1e-9: not the formula without ε, so no note; still wrong
        return _no_normaliser(phi_k, v, phi_q) / (torch.einsum("btk,bk->b", phi_k, phi_q)[:, None] + 1e-9)

    with pytest.raises(CheckFailed, match="sum_rule_retrieve: wrong values") as failure:
        checks.check_sum_rule_retrieve(other_eps)
    assert "note" not in str(failure.value)


def test_the_tiny_features_case_alone_tells_a_missing_eps_apart():
    # The tiny case is where a missing ε shows: there the answer without ε is off by more than 100%, not by rounding.
    tiny = list(checks._sum_rule_cases())[-1]
    want = sum_rule_retrieve(**tiny)
    assert ((_normaliser_without_eps(**tiny) - want).norm() / want.norm()).item() > 1.0


def test_dpfp_rolled_the_other_way_is_told_so():
    def rolled_back(x, nu):
        r = torch.cat([torch.relu(x), torch.relu(-x)], dim=-1)
        return torch.cat([r * torch.roll(r, -j, dims=-1) for j in range(1, nu + 1)], dim=-1)

    with pytest.raises(CheckFailed, match="the same products in another order"):
        checks.check_dpfp(rolled_back)


def test_a_sum_rule_without_gradient_is_rejected(capsys):
    # Review: an answer under torch.no_grad() passed the check and then stopped the chapter's training.
    def no_grad_sum_rule(phi_k, v, phi_q):  # the right formula, written out, under no_grad
        with torch.no_grad():
            S = torch.einsum("b t k, b t v -> b k v", phi_k, v)
            z = phi_k.sum(1)
            return torch.einsum("b k v, b k -> b v", S, phi_q) / (
                torch.einsum("b k, b k -> b", z, phi_q)[:, None] + 1e-6
            )

    with pytest.raises(CheckFailed, match="no gradient flows through your function"):
        checks.check_sum_rule_retrieve(no_grad_sum_rule)
    assert "PASS" not in capsys.readouterr().out


def test_the_sum_rule_check_still_reports_an_unattempted_stub(capsys):
    def stub(phi_k, v, phi_q):
        raise NotImplementedError()

    assert checks.check_sum_rule_retrieve(stub) is False
    assert "not attempted yet" in capsys.readouterr().out
