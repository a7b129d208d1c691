"""The log decay ``g``: a full reset (``g = −inf``) is exact in every gated form; NaN, +inf and ``g > 0`` are refused.

Before, ``g = −inf`` gave NaN silently in the chunk forms (``−inf − (−inf)`` in ``G_i − G_j``) while the recurrences
stayed finite.
"""

import pytest
import torch

from tests.helpers import fla_inputs
from ttr_edu import ops

B, T, H, D_K, D_V = 2, 40, 2, 5, 3


def make_inputs(dtype=torch.float64, seed=0):
    x = fla_inputs(B, T, H, D_K, D_V, dtype=dtype, seed=seed, beta=(0.0, 1.0), max_decay=0.2)
    return x["q"], x["k"], x["v"], x["beta"], x["g"]


#: name -> call(q, k, v, beta, g); every op that takes a log decay.
GATED = {
    "gated_linear_attention_recurrent": lambda q, k, v, b, g: ops.gated_linear_attention_recurrent(q, k, v, g),
    "gated_linear_attention_chunk": lambda q, k, v, b, g: ops.gated_linear_attention_chunk(q, k, v, g, chunk_size=8),
    "gated_delta_rule_recurrent": lambda q, k, v, b, g: ops.gated_delta_rule_recurrent(q, k, v, g, b),
    "gated_delta_rule_chunk": lambda q, k, v, b, g: ops.gated_delta_rule_chunk(q, k, v, g, b, chunk_size=8),
    "rls_recurrent": lambda q, k, v, b, g: ops.rls_recurrent(q, k, v, g=g),
    "rls_exact": lambda q, k, v, b, g: ops.rls_exact(q, k, v, g=g),
}
PAIRS = {  # chunk form -> (its recurrence, the same op from a zero state)
    "gated_linear_attention": (
        lambda q, k, v, b, g, **kw: ops.gated_linear_attention_chunk(q, k, v, g, chunk_size=8, **kw),
        lambda q, k, v, b, g, **kw: ops.gated_linear_attention_recurrent(q, k, v, g, **kw),
    ),
    "gated_delta_rule": (
        lambda q, k, v, b, g, **kw: ops.gated_delta_rule_chunk(q, k, v, g, b, chunk_size=8, **kw),
        lambda q, k, v, b, g, **kw: ops.gated_delta_rule_recurrent(q, k, v, g, b, **kw),
    ),
}


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("name", list(GATED))
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.5])
def test_a_g_that_is_no_decay_is_refused(name, bad):
    q, k, v, beta, g = make_inputs()
    g[1, 7, 0] = bad
    with pytest.raises(ValueError, match=r"^g: expected a log decay .*1 of 160"):
        GATED[name](q, k, v, beta, g)


@pytest.mark.parametrize("name", ["rls_recurrent", "rls_exact"])
def test_rls_reset_forgets_the_data_but_keeps_the_ridge(name):
    """With the constant ridge (MesaNet), g = −inf at token r restarts the regression: from r on, the outputs equal
    a fresh run on tokens r.. (the ridge λ survives the reset, so the solve stays well posed)."""
    q, k, v, beta, g = make_inputs()
    r = 13
    g[:, r] = float("-inf")
    o = GATED[name](q, k, v, beta, g)[0]
    fresh = GATED[name](q[:, r:], k[:, r:], v[:, r:], beta[:, r:], g[:, r:].clamp(min=-1.0))[0]
    assert torch.isfinite(o).all()
    assert rel_err(o[:, r:], fresh) <= 1e-12


@pytest.mark.parametrize("layer", list(PAIRS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reset_at", [0, 5, 8, 23, T - 1])  # first token, inside a chunk, on a chunk boundary, last
def test_a_full_reset_is_exact_in_the_chunk_form(layer, dtype, reset_at):
    chunk, recurrent = PAIRS[layer]
    q, k, v, beta, g = make_inputs(dtype, seed=reset_at)
    g[:, reset_at] = float("-inf")
    S0 = torch.randn(B, H, D_K, D_V, dtype=dtype)
    o_chunk, S_chunk = chunk(q, k, v, beta, g, initial_state=S0, output_final_state=True)
    o_rec, S_rec = recurrent(q, k, v, beta, g, initial_state=S0, output_final_state=True)
    assert torch.isfinite(o_chunk).all() and torch.isfinite(S_chunk).all()
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    assert rel_err(o_chunk, o_rec) <= tol
    assert rel_err(S_chunk, S_rec) <= tol
    # A reset at t forgets everything before t: from t on, the output is the suffix's from a zero state.
    suffix = slice(reset_at, None)
    o_fresh, _ = recurrent(q[:, suffix], k[:, suffix], v[:, suffix], beta[:, suffix], g[:, suffix])
    assert rel_err(o_chunk[:, suffix], o_fresh) <= tol


@pytest.mark.parametrize("layer", list(PAIRS))
def test_a_full_reset_has_finite_gradients(layer):
    chunk, recurrent = PAIRS[layer]
    inputs = [x.requires_grad_() for x in make_inputs()]
    q, k, v, beta, g = inputs
    at_13 = torch.arange(T)[None, :, None] == 13

    def gradients(form):
        o, _ = form(q, k, v, beta, g.masked_fill(at_13, float("-inf")))
        return torch.autograd.grad(o.square().sum(), inputs, allow_unused=True)

    grads, grads_rec = gradients(chunk), gradients(recurrent)
    for name, a, b in zip("q k v beta g".split(), grads, grads_rec):
        if b is None:  # beta in gated linear attention
            assert a is None, name
            continue
        assert torch.isfinite(a).all(), name
        assert rel_err(a, b) <= 1e-10, name


def test_large_decays_keep_fp32_precision():
    """``G_i − G_j`` of one cumulative sum loses the small decays once ``|G|`` is large; segment sums do not."""
    q, k, v, beta, g = make_inputs(torch.float64)
    g[:, 2] = -1e4  # exp(-1e4) = 0: a reset in all but name
    o_ref, _ = ops.gated_linear_attention_recurrent(q, k, v, g)
    o32, _ = ops.gated_linear_attention_chunk(*(x.float() for x in (q, k, v, g)), chunk_size=T)
    assert rel_err(o32.double(), o_ref) <= 1e-5
