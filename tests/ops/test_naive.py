"""Every form of every op equals its family's naive reference: the equation, one token at a time (``naive`` at the
end of each module of :mod:`ttr_edu.ops`, as fla keeps a ``naive.py`` beside each op). fp64, with a starting state,
the outputs and the final states."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.helpers import fla_inputs, relative_error
from ttr_edu import ops


def family(name):  # the module (ttr_edu.ops re-exports functions named like two of its modules)
    return importlib.import_module(f"ttr_edu.ops.{name}")


delta_product, delta_rule, gated_delta_rule = family("delta_product"), family("delta_rule"), family("gated_delta_rule")
gated_linear_attention, gla, linear_attention = (
    family("gated_linear_attention"),
    family("gla"),
    family("linear_attention"),
)
local_linear_attention, softmax_attention = family("local_linear_attention"), family("softmax_attention")
longhorn, rls, titans, ttt = family("longhorn"), family("rls"), family("titans"), family("ttt")

B, T, H, D_K, D_V = 2, 11, 2, 4, 3


def inputs(seed=0, **kw):
    return fla_inputs(B, T, H, D_K, D_V, seed=seed, initial_state=True, **kw)


def close(got, want, tol=1e-10):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            close(a, b, tol)
        return
    assert relative_error(got, want) < tol, relative_error(got, want)


def forms_agree(naive, forms, args, state_kw=None, tol=1e-10, **options):
    """Each form's ``(o, S_T)`` equals ``naive``'s on the same arguments and options."""
    want = naive(**args, **options)
    for form in forms:
        got = form(**args, **options, output_final_state=True)
        close(got[0], want[0], tol)
        close(got[1], want[1], tol)


@pytest.mark.parametrize("normalize", [False, True])
def test_linear_attention(normalize):
    a = inputs()
    args = dict(q=a["q"], k=a["k"].abs(), v=a["v"], initial_state=a["initial_state"])  # positive keys: z > 0
    if normalize:
        args["q"] = args["q"].abs()
        args["initial_state"] = (a["initial_state"], torch.rand(B, H, D_K, dtype=torch.float64))
    forms = [ops.linear_attention_recurrent, ops.linear_attention_parallel]
    forms += [lambda **kw: ops.linear_attention_chunk(**kw, chunk_size=4)]
    forms_agree(linear_attention.naive, forms, args, normalize=normalize)


def test_gated_linear_attention():
    a = inputs(max_decay=1.0)
    args = {n: a[n] for n in ("q", "k", "v", "g", "initial_state")}
    forms = [ops.gated_linear_attention_recurrent, lambda **kw: ops.gated_linear_attention_chunk(**kw, chunk_size=4)]
    forms_agree(gated_linear_attention.naive, forms, args)


def test_gla():
    a = inputs(max_decay=1.0, per_key_decay=True)
    args = {n: a[n] for n in ("q", "k", "v", "g", "initial_state")}
    forms_agree(gla.naive, [ops.gla_recurrent, lambda **kw: ops.gla_chunk(**kw, chunk_size=4)], args)


def test_delta_rule():
    a = inputs(beta=(0.0, 1.0))
    args = {n: a[n] for n in ("q", "k", "v", "beta", "initial_state")}
    forms = [ops.delta_rule_recurrent, ops.delta_rule_parallel, lambda **kw: ops.delta_rule_chunk(**kw, chunk_size=4)]
    forms_agree(delta_rule.naive, forms, args)


def test_gated_delta_rule():
    a = inputs(beta=(0.0, 1.0), max_decay=1.0)
    args = {n: a[n] for n in ("q", "k", "v", "g", "beta", "initial_state")}
    forms = [ops.gated_delta_rule_recurrent, lambda **kw: ops.gated_delta_rule_chunk(**kw, chunk_size=4)]
    forms_agree(gated_delta_rule.naive, forms, args)


@pytest.mark.parametrize("gated", [False, True])
def test_delta_product(gated):
    n_h = 3
    q = inputs()["q"]
    pairs = fla_inputs(B, T * n_h, H, D_K, D_V, seed=1, beta=(0.0, 1.0))
    args = dict(q=q, k=pairs["k"], v=pairs["v"], beta=pairs["beta"], num_householder=n_h)
    args["initial_state"] = inputs()["initial_state"]
    if gated:
        args["g"] = inputs(max_decay=1.0)["g"]
    forms = [ops.delta_product_recurrent, lambda **kw: ops.delta_product_chunk(**kw, chunk_size=4)]
    forms_agree(delta_product.naive, forms, args)


@pytest.mark.parametrize("per_channel", [False, True])
def test_longhorn(per_channel):
    a = inputs(key_norm="raw")
    beta = torch.rand(B, T, H, D_V, dtype=torch.float64) * 5 if per_channel else torch.rand(B, T, H) * 5
    args = dict(q=a["q"], k=a["k"], v=a["v"], beta=beta.double(), initial_state=a["initial_state"])
    forms = [ops.longhorn_recurrent, lambda **kw: ops.longhorn_chunk(**kw, chunk_size=4)]
    forms_agree(longhorn.naive, forms, args)
    forms_agree(longhorn.naive_diagonal, [ops.longhorn_diagonal_recurrent], args)


def test_longhorn_diagonal_differs_from_the_exact_step():
    a = inputs(key_norm="raw")
    beta = torch.rand(B, T, H, dtype=torch.float64) * 5
    exact = longhorn.naive(a["q"], a["k"], a["v"], beta)[0]
    assert relative_error(longhorn.naive_diagonal(a["q"], a["k"], a["v"], beta)[0], exact) > 1e-2


def rls_state(seed=3):
    """A state ``(S, P)`` that a ridge regression can reach: ``P`` symmetric positive definite."""
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(B, H, D_K, D_K, generator=gen, dtype=torch.float64)
    P = torch.linalg.inv(m @ m.mT + torch.eye(D_K, dtype=torch.float64))
    return torch.randn(B, H, D_K, D_V, generator=gen, dtype=torch.float64), P


@pytest.mark.parametrize("gated", [False, True])
def test_rls(gated):
    a = inputs(max_decay=1.0)
    args = dict(q=a["q"], k=a["k"], v=a["v"], initial_state=rls_state(), ridge=0.5)
    forms = [rls_form for rls_form in (ops.rls_recurrent, ops.rls_exact)]
    if gated:
        args["g"] = a["g"]
    else:
        forms.append(lambda **kw: ops.rls_chunk(**kw, chunk_size=4))
    forms_agree(rls.naive, forms, args, tol=1e-9)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_softmax_attention(qk_norm):
    a = inputs()
    cache = (a["k"][:, :3] * 2, a["v"][:, :3] * 2)
    args = dict(q=a["q"], k=a["k"], v=a["v"], initial_state=cache)
    forms_agree(softmax_attention.naive, [ops.softmax_attention], args, qk_norm=qk_norm, scale=2.0)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_local_linear_attention(qk_norm):
    a = inputs()
    cache = (a["k"][:, :3] * 2, a["v"][:, :3] * 2)
    args = dict(q=a["q"], k=a["k"], v=a["v"], initial_state=cache, ridge=0.1)
    forms_agree(local_linear_attention.naive, [ops.local_linear_attention], args, qk_norm=qk_norm)


def mlp_state(seed=4, D_h=5, D_v=D_V):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, D_K, D_h, generator=gen, dtype=torch.float64) / D_K**0.5,
        torch.randn(B, H, D_h, D_v, generator=gen, dtype=torch.float64) / D_h**0.5,
    )


@pytest.mark.parametrize("wrap", [{}, {"layer_norm": True, "residual": True}], ids=["plain", "ln_residual"])
@pytest.mark.parametrize("memory", ["linear", "mlp"])
def test_ttt(memory, wrap):
    D_v = D_K if wrap else D_V  # the residual x + LN(m(x)) needs D_v = D_k
    a = fla_inputs(B, T, H, D_K, D_v, seed=5, initial_state=True, beta=(0.0, 1.0))
    state = a["initial_state"] if memory == "linear" else mlp_state(D_v=D_v)
    args = dict(q=a["q"], k=a["k"], v=a["v"], beta=a["beta"], initial_state=state, mini_batch_size=3, **wrap)
    if memory == "linear":
        forms = [ops.ttt_linear_recurrent, ops.ttt_linear_chunk]
    else:
        forms = [ops.ttt_mlp_recurrent, ops.ttt_mlp_chunk]
    forms_agree(ttt.naive, forms, args)


@pytest.mark.parametrize("memory", ["linear", "mlp"])
def test_titans(memory):
    a = inputs(beta=(0.0, 1.0))
    gen = torch.Generator().manual_seed(6)
    eta, alpha = (torch.rand(B, T, H, generator=gen, dtype=torch.float64) for _ in range(2))
    state = a["initial_state"] if memory == "linear" else mlp_state()
    args = dict(q=a["q"], k=a["k"], v=a["v"], beta=a["beta"], eta=eta, alpha=0.2 * alpha, initial_state=state)
    forms_agree(titans.naive, [ops.titans_recurrent], args)


def test_the_naive_references_are_the_equations_not_the_forms():
    """A wrong update (the delta rule without its correction: linear attention) is told apart, so the agreement
    above is not vacuous."""
    a = inputs(beta=(0.5, 1.0))
    args = {n: a[n] for n in ("q", "k", "v", "initial_state")}
    delta = delta_rule.naive(**args, beta=a["beta"])[0]
    assert relative_error(linear_attention.naive(**args)[0], delta) > 1e-2
