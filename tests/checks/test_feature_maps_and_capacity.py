"""Chapter 03's checks accept a right answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from tests.checks.galleries import DTYPE_NAMED, accepted, ids, refused
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
    # Without the note, "got -0.1828823, expected -0.1828822" would read as rounding.
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
    tiny = next(case for case in checks._sum_rule_cases() if case["phi_k"].max() < 1e-3)
    want = sum_rule_retrieve(**tiny)
    assert ((_normaliser_without_eps(**tiny) - want).norm() / want.norm()).item() > 1.0


def test_dpfp_rolled_the_other_way_is_told_so():
    def rolled_back(x, nu):
        r = torch.cat([torch.relu(x), torch.relu(-x)], dim=-1)
        return torch.cat([r * torch.roll(r, -j, dims=-1) for j in range(1, nu + 1)], dim=-1)

    with pytest.raises(CheckFailed, match="the same products in another order"):
        checks.check_dpfp(rolled_back)


def test_a_sum_rule_without_gradient_is_rejected(capsys):
    # An answer under torch.no_grad() has the right values and would stop the chapter's training.
    def no_grad_sum_rule(phi_k, v, phi_q):  # the right formula, written out, under no_grad
        with torch.no_grad():
            S = torch.einsum("b t k, b t v -> b k v", phi_k, v)
            z = phi_k.sum(1)
            return torch.einsum("b k v, b k -> b v", S, phi_q) / (
                torch.einsum("b k, b k -> b", z, phi_q)[:, None] + 1e-6
            )

    with pytest.raises(CheckFailed, match="does not carry gradients back to phi_k"):
        checks.check_sum_rule_retrieve(no_grad_sum_rule)
    assert "PASS" not in capsys.readouterr().out


def test_the_sum_rule_check_still_reports_an_unattempted_stub(capsys):
    def stub(phi_k, v, phi_q):
        raise NotImplementedError()

    assert checks.check_sum_rule_retrieve(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


# -- the galleries: plausible wrong answers, and right answers written differently ------------------------------------


def _dpfp_variant(x, nu, *, first=1, sign=1, signed=False, roll_x=False, dim=-1, interleave=False):
    r = torch.cat([torch.relu(x), -torch.relu(-x) if signed else torch.relu(-x)], dim)
    shifts = [sign * j for j in range(first, first + nu)]
    if roll_x:  # rolls x before the ReLU split, not r
        blocks = [
            r * torch.cat([torch.relu(torch.roll(x, j, -1)), torch.relu(-torch.roll(x, j, -1))], -1) for j in shifts
        ]
    else:
        blocks = [r * torch.roll(r, j, dims=dim) for j in shifts]
    return torch.stack(blocks, -1).flatten(-2) if interleave else torch.cat(blocks, dim)


def _favor_variant(x, projection, *, damping="half", width="2m", transposed=True, batch_norm=False, pairs="blocks"):
    m = projection.shape[0]
    wx = x @ projection.T if transposed or m != projection.shape[1] else x @ projection
    squared = (x**2).sum() if batch_norm else (x**2).sum(-1, keepdim=True)
    factor = {"half": torch.exp(-0.5 * squared), "none": 1.0, "full": torch.exp(-squared),
              "norm": torch.exp(-0.5 * x.norm(dim=-1, keepdim=True))}[damping]  # fmt: skip
    features = torch.stack([torch.exp(wx), torch.exp(-wx)], -1).flatten(-2) if pairs == "interleaved" else (
        torch.cat([torch.exp(wx), torch.exp(-wx)], -1) if pairs == "blocks" else torch.exp(wx))  # fmt: skip
    return factor * features / math.sqrt((2 if width == "2m" else 1) * m)


def _sum_rule_variant(phi_k, v, phi_q, *, detach="", mean=False):
    if "phi_k" in detach:
        phi_k = phi_k.detach()
    if "phi_q" in detach:
        phi_q = phi_q.detach()
    S = torch.einsum("b t k, b t v -> b k v", phi_k, v)
    z = phi_k.sum(1)
    if mean:
        S, z = S / phi_k.shape[1], z / phi_k.shape[1]
    if "S" in detach:  # "the fast weights are not trained by backprop"
        S = S.detach()
    if "z" in detach:  # the normaliser taken as a constant
        z = z.detach()
    return torch.einsum("b k v, b k -> b v", S, phi_q) / (torch.einsum("b k, b k -> b", z, phi_q)[:, None] + 1e-6)


def _sum_rule_under_no_grad(phi_k, v, phi_q):
    with torch.no_grad():
        return _sum_rule_variant(phi_k, v, phi_q)


def _one_hot(target, y):
    return F.one_hot(target, y.shape[1]).to(y.dtype)


def _retrieve_by_softmax(phi_k, v, phi_q):
    return torch.einsum("b t, b t v -> b v", torch.softmax(torch.einsum("b t k, b k -> b t", phi_k, phi_q), -1), v)


WRONG_ANSWERS = [
    ("3.1 roll by −j", checks.check_dpfp, partial(_dpfp_variant, sign=-1),
     "the same products in another order"),
    ("3.1 j from 0 (r ⊙ r first)", checks.check_dpfp, partial(_dpfp_variant, first=0),
     "wrong values"),
    ("3.1 roll without dims", checks.check_dpfp, dpfp_roll_without_dims, "wrong values"),
    ("3.1 r = [ReLU(x); −ReLU(−x)]", checks.check_dpfp, partial(_dpfp_variant, signed=True),
     "wrong values"),
    ("3.1 rolls x, not r", checks.check_dpfp, partial(_dpfp_variant, roll_x=True), "wrong values"),
    ("3.1 concatenated on dim 0", checks.check_dpfp, partial(_dpfp_variant, dim=0), "wrong"),
    ("3.1 blocks interleaved", checks.check_dpfp, partial(_dpfp_variant, interleave=True), "wrong values"),
    ("3.2 no damping", checks.check_favor_plus, partial(_favor_variant, damping="none"), "wrong values"),
    ("3.2 ‖x‖ instead of ‖x‖²", checks.check_favor_plus, partial(_favor_variant, damping="norm"),
     "wrong values"),
    ("3.2 √m instead of √(2m)", checks.check_favor_plus, partial(_favor_variant, width="m"),
     "wrong values"),
    ("3.2 damping summed over the batch", checks.check_favor_plus, partial(_favor_variant, batch_norm=True),
     "wrong values"),
    ("3.2 x Ω for a square Ω", checks.check_favor_plus, partial(_favor_variant, transposed=False),
     r"wrong values .*\n.*projection=tensor\(5, 5\)"),
    ("3.2 one-sided features", checks.check_favor_plus, partial(_favor_variant, pairs="one", width="m"),
     "wrong shape"),
    ("3.2 [e⁺, e⁻] pairs interleaved", checks.check_favor_plus,
     partial(_favor_variant, pairs="interleaved"), "wrong values"),
    ("3.2 damping exp(−‖x‖²)", checks.check_favor_plus, partial(_favor_variant, damping="full"),
     "wrong values"),
    ("3.3 mean over the entries", checks.check_retrieval_loss, loss_mean_over_values, "wrong values"),
    ("3.3 no ½", checks.check_retrieval_loss, loss_without_half, "wrong values"),
    ("3.3 one-hot width from the targets", checks.check_retrieval_loss,
     lambda y, target: 0.5 * ((y - F.one_hot(target).to(y.dtype)) ** 2).sum(-1).mean(), "raised RuntimeError"),
    ("3.3 ½ F.mse_loss", checks.check_retrieval_loss, lambda y, target: 0.5 * F.mse_loss(y, _one_hot(target, y)),
     "wrong values"),
    ("3.3 summed over the batch", checks.check_retrieval_loss,
     lambda y, target: 0.5 * ((y - _one_hot(target, y)) ** 2).sum(), "wrong values"),
    ("3.3 cross-entropy", checks.check_retrieval_loss, lambda y, target: F.cross_entropy(y, target), "wrong values"),
    ("3.3 a loss on y.detach()", checks.check_retrieval_loss, lambda y, target: loss(y.detach(), target),
     "does not carry gradients back to y.*\n.*the training below follows its gradient through y"),
    ("3.4 mean for S and z", checks.check_sum_rule_retrieve, partial(_sum_rule_variant, mean=True),
     "wrong values"),
    ("3.4 under torch.no_grad()", checks.check_sum_rule_retrieve, _sum_rule_under_no_grad,
     "does not carry gradients back to phi_k"),
    ("3.4 φ(k) detached", checks.check_sum_rule_retrieve, partial(_sum_rule_variant, detach="phi_k"),
     "does not carry gradients back to phi_k.*\n.*learns the key and query projections"),
    ("3.4 φ(q) detached", checks.check_sum_rule_retrieve, partial(_sum_rule_variant, detach="phi_q"),
     "does not carry gradients back to phi_q"),
    ("3.4 the memory S detached", checks.check_sum_rule_retrieve, partial(_sum_rule_variant, detach="S"),
     "gradient with respect to phi_k is wrong: its norm is .* where the reference's is .*\n  inputs: phi_k="),
    ("3.4 the normaliser z detached", checks.check_sum_rule_retrieve, partial(_sum_rule_variant, detach="z"),
     "gradient with respect to phi_k is wrong"),
    ("3.4 no normaliser", checks.check_sum_rule_retrieve, _no_normaliser, "wrong values"),
    ("3.4 softmax weights", checks.check_sum_rule_retrieve, _retrieve_by_softmax, "wrong values"),
    ("3.4 divided by Σ z", checks.check_sum_rule_retrieve,
     lambda phi_k, v, phi_q: _no_normaliser(phi_k, v, phi_q) / (phi_k.sum((1, 2))[:, None] + 1e-6), "wrong values"),
    ("3.4 Sᵀ(q / Σq), a delta-style read", checks.check_sum_rule_retrieve,
     lambda phi_k, v, phi_q: _no_normaliser(phi_k, v, phi_q / (phi_q.sum(-1, keepdim=True) + 1e-6)), "wrong values"),
    ("3.4 the package's sum_rule_retrieve", checks.check_sum_rule_retrieve,
     lambda phi_k, v, phi_q: sum_rule_retrieve(phi_k, v, phi_q), "calls the package's own implementation"),
]  # fmt: skip


@pytest.mark.parametrize("label,check,answer,reason", WRONG_ANSWERS, ids=ids(WRONG_ANSWERS))
def test_a_plausible_wrong_answer_is_refused_for_its_reason(label, check, answer, reason, capsys):
    refused(check, answer, reason, capsys)


def _dpfp_by_loop(x, nu):  # one feature block at a time, by index arithmetic instead of torch.roll
    r = torch.cat([torch.relu(x), torch.relu(-x)], dim=-1)
    width = r.shape[-1]
    blocks = []
    for j in range(1, nu + 1):
        index = (torch.arange(width) - j) % width
        blocks.append(r * r[..., index])
    return torch.cat(blocks, dim=-1)


def _sum_rule_by_loop(phi_k, v, phi_q):  # writes one pair at a time: the gradients still flow
    S = phi_k.new_zeros(phi_k.shape[0], phi_k.shape[2], v.shape[2])
    z = phi_k.new_zeros(phi_k.shape[0], phi_k.shape[2])
    for t in range(phi_k.shape[1]):
        S = S + phi_k[:, t, :, None] * v[:, t, None, :]
        z = z + phi_k[:, t]
    return (S.transpose(1, 2) @ phi_q[..., None])[..., 0] / ((z * phi_q).sum(-1, keepdim=True) + 1e-6)


RIGHT_VARIANTS = [
    ("3.1 index arithmetic instead of roll", checks.check_dpfp, _dpfp_by_loop, None),
    ("3.1 in float32", checks.check_dpfp, lambda x, nu: dpfp(x.float(), nu), DTYPE_NAMED),
    ("3.2 Ω x as an einsum, one exp", checks.check_favor_plus,
     lambda x, projection: torch.exp(
         torch.einsum("... d, s m d -> ... s m", x, torch.stack([projection, -projection])).flatten(-2)
         - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(2 * projection.shape[0]), None),
    ("3.3 through F.mse_loss", checks.check_retrieval_loss,
     lambda y, target: 0.5 * y.shape[1] * F.mse_loss(y, _one_hot(target, y)), None),
    ("3.4 a loop over the pairs", checks.check_sum_rule_retrieve, _sum_rule_by_loop, None),
    ("3.4 one einsum for the numerator", checks.check_sum_rule_retrieve,
     lambda phi_k, v, phi_q: _no_normaliser(phi_k, v, phi_q)
     / (torch.einsum("b t k, b k -> b", phi_k, phi_q)[:, None] + 1e-6), None),
]  # fmt: skip


@pytest.mark.parametrize("label,check,answer,expected", RIGHT_VARIANTS, ids=ids(RIGHT_VARIANTS))
def test_a_right_answer_written_differently_passes(label, check, answer, expected, capsys):
    accepted(check, answer, expected, capsys)


# -- Exercise 3.5: the variance of one FAVOR+ draw, derived ------------------------------------------------------------


def _exp2qk(q, k):
    return torch.exp(2 * (q * k).sum(-1))


def favor_variance(q, k, m):  # the derivation's result, written as a student would (cosh − 1)
    return _exp2qk(q, k) * (torch.cosh(((q + k) ** 2).sum(-1)) - 1) / m


def favor_variance_by_moments(q, k, m):  # E[X²] − E[X]², X the contribution of one row
    second = torch.exp(-(q**2).sum(-1) - (k**2).sum(-1)) * (1 + torch.exp(2 * ((q + k) ** 2).sum(-1))) / 2
    return (second - _exp2qk(q, k)) / m


#: plausible slips of the derivation: each differs from the closed form on the check's cases
VARIANCE_SLIPS = {
    "the two halves of a row taken as 2m independent features": lambda q, k, m: (
        _exp2qk(q, k) * (torch.exp(((q + k) ** 2).sum(-1)) - 1) / (2 * m)
    ),
    "‖q‖² + ‖k‖² for ‖q + k‖² (the cross term dropped)": lambda q, k, m: (
        _exp2qk(q, k) * (torch.cosh((q**2).sum(-1) + (k**2).sum(-1)) - 1) / m
    ),
    "the second moment, not the variance": lambda q, k, m: _exp2qk(q, k) * torch.cosh(((q + k) ** 2).sum(-1)) / m,
    "1/m missing": lambda q, k, m: _exp2qk(q, k) * (torch.cosh(((q + k) ** 2).sum(-1)) - 1),
    "1/(2m) for 1/m": lambda q, k, m: favor_variance(q, k, m) / 2,
    "exp(q·k) for exp(2 q·k)": lambda q, k, m: favor_variance(q, k, m) * torch.exp(-(q * k).sum(-1)),
    "cosh 2u for cosh² u": lambda q, k, m: _exp2qk(q, k) * (torch.cosh(2 * ((q + k) ** 2).sum(-1)) - 1) / m,
    "the relative variance (not times exp(2 q·k))": lambda q, k, m: (torch.cosh(((q + k) ** 2).sum(-1)) - 1) / m,
    "the standard deviation": lambda q, k, m: favor_variance(q, k, m).sqrt(),
    "‖q − k‖² for ‖q + k‖²": lambda q, k, m: _exp2qk(q, k) * (torch.cosh(((q - k) ** 2).sum(-1)) - 1) / m,
}


def _monte_carlo_variance(q, k, m):  # an estimate over many draws: close, never exact
    from ttr_edu.ops.feature_maps import favor_plus

    g = torch.Generator().manual_seed(0)
    draws = torch.stack(
        [
            (favor_plus(q, omega) * favor_plus(k, omega)).sum(-1)
            for omega in torch.randn(400, m, q.shape[-1], generator=g, dtype=q.dtype)
        ]
    )
    return draws.var(0)


@pytest.mark.parametrize("answer", [favor_variance, favor_variance_by_moments])
def test_the_favor_variance_check_passes_the_closed_form_written_two_ways(answer, capsys):
    assert checks.check_favor_variance(answer) is True
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("slip", sorted(VARIANCE_SLIPS))
def test_the_favor_variance_check_refuses_each_slip_of_the_derivation(slip):
    with pytest.raises(CheckFailed, match="favor_variance"):
        checks.check_favor_variance(VARIANCE_SLIPS[slip])


def test_the_favor_variance_check_refuses_a_monte_carlo_estimate_and_the_packages_formula():
    with pytest.raises(CheckFailed, match="favor_variance"):
        checks.check_favor_variance(_monte_carlo_variance)
    from ttr_edu.ops.feature_maps import favor_plus_variance

    with pytest.raises(CheckFailed, match="own implementation|write"):
        checks.check_favor_variance(lambda q, k, m: favor_plus_variance(q, k, m))


def _monte_carlo_by_hand(q, k, m, draws=4000):  # 4000 draws of Ω, the features written out: no package function
    g = torch.Generator().manual_seed(0)
    omega = torch.randn(draws, m, q.shape[-1], generator=g, dtype=torch.float64)

    def features(x):
        p = torch.einsum("... d, n m d -> n ... m", x.double(), omega)
        scale = torch.exp(-(x.double() ** 2).sum(-1) / 2)[None, ..., None] / (2 * m) ** 0.5
        return torch.cat([torch.exp(p), torch.exp(-p)], -1) * scale

    return (features(q) * features(k)).sum(-1).var(0).to(q.dtype)


def test_a_monte_carlo_estimate_is_told_that_it_is_not_exact():
    with pytest.raises(CheckFailed, match=r"favor_variance: wrong values(.|\n)*A Monte Carlo estimate is not exact"):
        checks.check_favor_variance(_monte_carlo_by_hand)


def test_a_sum_rule_with_a_detached_state_is_first_shown_on_a_case_with_several_tokens():
    def detached_state(phi_k, v, phi_q):
        S = torch.einsum("b t k, b t v -> b k v", phi_k, v).detach()
        z = phi_k.sum(1)
        return torch.einsum("b k v, b k -> b v", S, phi_q) / (torch.einsum("b k, b k -> b", z, phi_q)[:, None] + 1e-6)

    with pytest.raises(CheckFailed, match=r"gradient with respect to phi_k is wrong(.|\n)*phi_k=tensor\(2, 5, 4\)"):
        checks.check_sum_rule_retrieve(detached_state)


def test_every_slip_is_caught_by_a_case_of_one_kind_alone():
    """No slip hides behind one case: each differs from the closed form on the float64 cases of several norms (the
    independent ones) and is caught there, not only on the antithetic or the float32 one."""
    from ttr_edu.checks.feature_maps_and_capacity import _variance_cases
    from ttr_edu.ops.feature_maps import favor_plus_variance

    independent = list(_variance_cases())[:4]
    for slip, wrong in VARIANCE_SLIPS.items():
        assert any(
            not torch.allclose(wrong(**c), favor_plus_variance(**c), rtol=1e-6, atol=1e-12) for c in independent
        ), slip
