"""Every op returns its output as fla's ops do: a contiguous ``(B, T, H, D_v)`` tensor, so a caller may ``view`` it
(``o.view(B, T, H * D_v)``) as it would fla's, for one sequence or several, with a padded last chunk or not."""

import pytest
import torch
import torch.nn.functional as F

from ttr_edu import ops

B, T, H, D = 2, 5, 3, 4


def inputs(seed=0, rows=T):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=gen)
    k = F.normalize(torch.randn(B, rows, H, D, generator=gen), dim=-1)
    v = torch.randn(B, rows, H, D, generator=gen)
    beta = 0.05 + 0.9 * torch.rand(B, rows, H, generator=gen)
    g = -0.5 * torch.rand(B, T, H, generator=gen)
    gate = 0.9 * torch.rand(B, T, H, generator=gen)
    return q, k, v, beta, g, gate


def per_key(g):
    return g.unsqueeze(-1).expand(B, T, H, D).contiguous()


def mlp_weights(hidden=8):
    """TTT-MLP's starting weights (W1, W2): at zero it learns nothing, so the op asks for them."""
    gen = torch.Generator().manual_seed(1)
    return (0.1 * torch.randn(B, H, D, hidden, generator=gen), 0.1 * torch.randn(B, H, hidden, D, generator=gen))


#: op name -> call(q, k, v, beta, g, gate); the chunk forms with chunk_size 2, so T = 5 pads its last chunk
CALLS = {
    "linear_attention_recurrent": lambda q, k, v, b, g, a: ops.linear_attention_recurrent(q, k, v),
    "linear_attention_parallel": lambda q, k, v, b, g, a: ops.linear_attention_parallel(q, k, v),
    "linear_attention_chunk": lambda q, k, v, b, g, a: ops.linear_attention_chunk(q, k, v, chunk_size=2),
    "linear_attention_chunk normalized": lambda q, k, v, b, g, a: ops.linear_attention_chunk(
        ops.elu_plus_one(q), ops.elu_plus_one(k), v, normalize=True, chunk_size=2
    ),
    "delta_rule_recurrent": lambda q, k, v, b, g, a: ops.delta_rule_recurrent(q, k, v, b),
    "delta_rule_parallel": lambda q, k, v, b, g, a: ops.delta_rule_parallel(q, k, v, b),
    "delta_rule_chunk": lambda q, k, v, b, g, a: ops.delta_rule_chunk(q, k, v, b, chunk_size=2),
    "gated_linear_attention_recurrent": lambda q, k, v, b, g, a: ops.gated_linear_attention_recurrent(q, k, v, g),
    "gated_linear_attention_chunk": lambda q, k, v, b, g, a: ops.gated_linear_attention_chunk(q, k, v, g, chunk_size=2),
    "gla_recurrent": lambda q, k, v, b, g, a: ops.gla_recurrent(q, k, v, per_key(g)),
    "gla_chunk": lambda q, k, v, b, g, a: ops.gla_chunk(q, k, v, per_key(g), chunk_size=2),
    "gated_delta_rule_recurrent": lambda q, k, v, b, g, a: ops.gated_delta_rule_recurrent(q, k, v, g, b),
    "gated_delta_rule_chunk": lambda q, k, v, b, g, a: ops.gated_delta_rule_chunk(q, k, v, g, b, chunk_size=2),
    "rls_recurrent": lambda q, k, v, b, g, a: ops.rls_recurrent(q, k, v),
    "rls_recurrent gated": lambda q, k, v, b, g, a: ops.rls_recurrent(q, k, v, g=g),
    "rls_chunk": lambda q, k, v, b, g, a: ops.rls_chunk(q, k, v, chunk_size=2),
    "rls_exact": lambda q, k, v, b, g, a: ops.rls_exact(q, k, v),
    "softmax_attention": lambda q, k, v, b, g, a: ops.softmax_attention(q, k, v),
    "local_linear_attention": lambda q, k, v, b, g, a: ops.local_linear_attention(q, k, v),
    "longhorn_recurrent": lambda q, k, v, b, g, a: ops.longhorn_recurrent(q, k, v, b),
    "longhorn_chunk": lambda q, k, v, b, g, a: ops.longhorn_chunk(q, k, v, b, chunk_size=2),
    "longhorn_diagonal_recurrent": lambda q, k, v, b, g, a: ops.longhorn_diagonal_recurrent(q, k, v, b),
    "ttt_linear_recurrent": lambda q, k, v, b, g, a: ops.ttt_linear_recurrent(q, k, v, b, mini_batch_size=2),
    "ttt_linear_chunk": lambda q, k, v, b, g, a: ops.ttt_linear_chunk(q, k, v, b, mini_batch_size=2),
    "ttt_mlp_recurrent": lambda q, k, v, b, g, a: ops.ttt_mlp_recurrent(
        q, k, v, b, mini_batch_size=2, initial_state=mlp_weights()
    ),
    "ttt_mlp_chunk": lambda q, k, v, b, g, a: ops.ttt_mlp_chunk(
        q, k, v, b, mini_batch_size=2, initial_state=mlp_weights()
    ),
    "titans_recurrent": lambda q, k, v, b, g, a: ops.titans_recurrent(q, k, v, 0.5 * b, a, a),
}


@pytest.mark.parametrize("name", CALLS)
def test_output_is_contiguous_in_fla_layout(name):
    o, _ = CALLS[name](*inputs())
    assert o.shape == (B, T, H, D), o.shape
    assert o.is_contiguous(), f"{name}: strides {o.stride()}"


@pytest.mark.parametrize("form", ["recurrent", "chunk"])
def test_delta_product_output_is_contiguous_in_fla_layout(form):
    q, k, v, beta, g, _ = inputs(rows=2 * T)  # two Householder steps per token: k, v, beta interleaved, 2T rows
    fn = getattr(ops, f"delta_product_{form}")
    o, _ = fn(q, k, v, beta, num_householder=2, g=g, **({"chunk_size": 2} if form == "chunk" else {}))
    assert o.shape == (B, T, H, D) and o.is_contiguous(), o.stride()


def test_every_op_returning_an_output_is_covered():
    covered = {name.split()[0] for name in CALLS} | {"delta_product_recurrent", "delta_product_chunk"}
    returning = {n for n in ops.__all__ if n.endswith(("_recurrent", "_parallel", "_chunk", "_exact", "_attention"))}
    assert returning <= covered, returning - covered
