"""ttr_edu against flash-linear-attention's own pure-PyTorch references, where fla is installed (skipped otherwise).

fla is a peer, never a dependency (``pip install -e .[bench]`` installs it). Its ``naive.py`` references run on a
CPU and always compute in fp32, so ours are compared in fp32 (and our fp64 against their fp32, to fp32 rounding).
fla's naive references take no ``cu_seqlens``; the varlen case is compared with them run sequence by sequence.
"""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import relative_error
from tests.helpers.fla_naive import fla_naive
from ttr_edu import ops

if fla_naive("gla") is None:
    pytest.skip("flash-linear-attention is not installed (pip install -e .[bench])", allow_module_level=True)

FP32 = 2e-6  # fp32 against fp32: different summation orders only
CU = [0, 37, 38, 100, 128]


def make(B=2, T=100, H=3, D_k=16, D_v=16, seed=0, temperature=1.0):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen)
    q, k, v = rand(B, T, H, D_k), rand(B, T, H, D_k), rand(B, T, H, D_v)
    gk = F.logsigmoid(rand(B, T, H, D_k)) / temperature
    g = F.logsigmoid(rand(B, T, H)) / temperature
    S0 = rand(B, H, D_k, D_v)
    return q, k, v, gk, g, S0


@pytest.mark.parametrize("temperature", [1.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_per_key_gla_matches_fla_naive_recurrent_gla(dtype, temperature):
    q, k, v, gk, _, S0 = make(temperature=temperature)
    o_fla, S_fla = fla_naive("gla").naive_recurrent_gla(q, k, v, gk, initial_state=S0, output_final_state=True)
    tol = FP32 if dtype == torch.float32 else 1e-6  # our fp64 against fla's fp32
    for fn in (ops.gla_recurrent, ops.gla_chunk):
        o, S = fn(*(x.to(dtype) for x in (q, k, v, gk)), initial_state=S0.to(dtype), output_final_state=True)
        assert relative_error(o, o_fla) < tol and relative_error(S, S_fla) < tol


def test_scalar_gla_matches_fla_simple_gla_references():
    q, k, v, _, g, S0 = make()
    naive = fla_naive("simple_gla")
    o_rec, S_rec = naive.naive_recurrent_simple_gla(q, k, v, g, initial_state=S0, output_final_state=True)
    o_chk, S_chk = naive.naive_chunk_simple_gla(q, k, v, g, initial_state=S0, output_final_state=True, chunk_size=64)
    o, S = ops.gated_linear_attention_chunk(q, k, v, g, initial_state=S0, output_final_state=True)
    for o_fla, S_fla in ((o_rec, S_rec), (o_chk, S_chk)):
        assert relative_error(o, o_fla) < FP32 and relative_error(S, S_fla) < FP32


@pytest.mark.parametrize(
    "layer",
    ["gla", "simple_gla", "gated_delta_rule", "linear_attn"],
)
def test_varlen_matches_fla_naive_run_sequence_by_sequence(layer):
    q, k, v, gk, g, S0 = make(B=1, T=CU[-1])
    N = len(CU) - 1
    S0 = torch.randn(N, *S0.shape[1:], generator=torch.Generator().manual_seed(1))
    beta = torch.rand(1, CU[-1], 3, generator=torch.Generator().manual_seed(2))
    k_unit = F.normalize(k, dim=-1)
    if layer == "gla":
        ours = lambda cu, s: ops.gla_chunk(q, k, v, gk, initial_state=s, output_final_state=True, cu_seqlens=cu)
        theirs = lambda a, b, s: fla_naive("gla").naive_recurrent_gla(
            q[:, a:b], k[:, a:b], v[:, a:b], gk[:, a:b], initial_state=s, output_final_state=True
        )
    elif layer == "simple_gla":
        ours = lambda cu, s: ops.gated_linear_attention_chunk(
            q, k, v, g, initial_state=s, output_final_state=True, cu_seqlens=cu
        )
        theirs = lambda a, b, s: fla_naive("simple_gla").naive_chunk_simple_gla(
            q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], initial_state=s, output_final_state=True
        )
    elif layer == "gated_delta_rule":
        ours = lambda cu, s: ops.gated_delta_rule_chunk(
            q, k_unit, v, g, beta, initial_state=s, output_final_state=True, cu_seqlens=cu
        )
        theirs = lambda a, b, s: fla_naive("gated_delta_rule").naive_chunk_gated_delta_rule(
            q[:, a:b], k_unit[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b], initial_state=s, output_final_state=True
        )
    else:
        ours = lambda cu, s: ops.linear_attention_chunk(
            q, k, v, initial_state=s, output_final_state=True, cu_seqlens=cu
        )
        theirs = lambda a, b, s: fla_naive("linear_attn").naive_recurrent_linear_attn(
            q[:, a:b], k[:, a:b], v[:, a:b], initial_state=s, output_final_state=True
        )
    o, S = ours(torch.tensor(CU), S0)
    for n, (a, b) in enumerate(zip(CU, CU[1:])):
        o_fla, S_fla = theirs(a, b, S0[n : n + 1])
        assert relative_error(o[:, a:b], o_fla) < FP32 and relative_error(S[n : n + 1], S_fla) < FP32


def test_normalised_linear_attention_conventions_differ_only_as_documented():
    """fla normalises by default (``chunk_linear_attn(normalize=True)``), with eps = 1e-10, and carries z as
    ``(B, 1, H, D_k)``; ours defaults to ``normalize=False``, eps = 1e-6, z ``(B, H, D_k)``."""
    q, k, v, *_ = make()
    q, k = F.elu(q) + 1, F.elu(k) + 1
    o_fla, (S_fla, z_fla) = fla_naive("linear_attn").naive_recurrent_linear_attn(
        q, k, v, normalize=True, output_final_state=True
    )
    o, (S, z) = ops.linear_attention_chunk(q, k, v, normalize=True, eps=1e-10, output_final_state=True)
    assert relative_error(o, o_fla) < FP32 and relative_error(S, S_fla) < FP32
    assert z_fla.shape == (2, 1, 3, 16) and z.shape == (2, 3, 16)
    assert relative_error(z, z_fla.squeeze(1)) < FP32
    o_default, _ = ops.linear_attention_chunk(q, k, v)
    assert relative_error(o_default, o_fla) > 0.5  # not normalised by default: a different function


def test_delta_rule_matches_fla_naive_chunkwise():
    q, k, v, *_ = make(T=128)
    k = F.normalize(k, dim=-1)
    beta = torch.rand(2, 128, 3, generator=torch.Generator().manual_seed(3))
    o_fla, S_fla = fla_naive("delta_rule").delta_rule_chunkwise(
        *(x.transpose(1, 2) for x in (q, k, v, beta)), chunk_size=64
    )  # fla's naive chunk form is heads-first
    o, S = ops.delta_rule_chunk(q, k, v, beta, output_final_state=True)
    assert relative_error(o, o_fla.transpose(1, 2)) < FP32 and relative_error(S, S_fla) < FP32
