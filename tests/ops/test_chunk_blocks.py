"""The chunk forms' machinery (:mod:`ttr_edu.ops._chunking`): blocks read in place from the caller's layout,
buffers reused under ``no_grad``, the same code out of place under autograd. Whatever path a call takes, every chunk
form equals its recurrent form: fp64 to 1e-12, fp32 to 1e-5."""

import pytest
import torch

from tests.helpers import fla_inputs, relative_error
from ttr_edu import ops
from ttr_edu.ops import _chunking, delta_rule, linear_attention

#: chunk form, recurrent form, the per-token tensors each takes after q, k, v (by fla_inputs name)
FORMS = {
    "linear_attention": (ops.linear_attention_chunk, ops.linear_attention_recurrent, ()),
    "delta_rule": (ops.delta_rule_chunk, ops.delta_rule_recurrent, ("beta",)),
    "gated_linear_attention": (ops.gated_linear_attention_chunk, ops.gated_linear_attention_recurrent, ("g",)),
    "gated_delta_rule": (ops.gated_delta_rule_chunk, ops.gated_delta_rule_recurrent, ("g", "beta")),
    "gla": (ops.gla_chunk, ops.gla_recurrent, ("g",)),
}
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


def inputs(layer, B=2, T=45, H=3, D_k=8, D_v=5, dtype=torch.float64, seed=0, max_decay=0.3):
    x = fla_inputs(
        B, T, H, D_k, D_v, dtype=dtype, seed=seed, beta=(0.05, 1.0), max_decay=max_decay,
        per_key_decay=layer == "gla", initial_state=True,
    )  # fmt: skip
    return [x["q"], x["k"], x["v"], *(x[name] for name in FORMS[layer][2])], x["initial_state"]


def run(layer, args, S0, **options):
    chunk, _, _ = FORMS[layer]
    return chunk(*args, initial_state=S0, output_final_state=True, **options)


@pytest.mark.parametrize("layer", FORMS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("T, chunk_size", [(64, 16), (45, 8), (5, 64), (130, 64)])
def test_chunk_equals_recurrent_in_every_block_layout(layer, dtype, T, chunk_size):
    """Whole blocks, ragged blocks, a padded last chunk, a chunk longer than T (capped)."""
    args, S0 = inputs(layer, T=T, dtype=dtype)
    _, recurrent, _ = FORMS[layer]
    o_r, S_r = recurrent(*args, initial_state=S0, output_final_state=True)
    with torch.no_grad():
        o, S = run(layer, args, S0, chunk_size=chunk_size)
    assert relative_error(o, o_r) <= TOL[dtype] and relative_error(S, S_r) <= TOL[dtype]


@pytest.mark.parametrize("layer", FORMS)
@pytest.mark.parametrize("block_rows", [1, 100, 10**6])
def test_buffers_reused_across_blocks_and_autograd_path_agree(monkeypatch, layer, block_rows):
    """Under no_grad the blocks share buffers and work in place; with an input that requires a gradient the same
    code runs out of place. One chunk per block, ragged blocks, or all in one block: the same outputs and state."""
    monkeypatch.setattr(_chunking, "BLOCK_ROWS", block_rows)
    args, S0 = inputs(layer, T=53)
    with torch.no_grad():
        o_fast, S_fast = run(layer, args, S0, chunk_size=8)
    tracked = [x.clone().requires_grad_() for x in args]
    o_grad, S_grad = run(layer, tracked, S0, chunk_size=8)
    assert o_grad.requires_grad and S_grad.requires_grad
    assert relative_error(o_grad.detach(), o_fast) <= 1e-13 and relative_error(S_grad.detach(), S_fast) <= 1e-13
    _, recurrent, _ = FORMS[layer]
    o_r, S_r = recurrent(*tracked, initial_state=S0, output_final_state=True)
    probe = torch.randn_like(o_r)
    grads = torch.autograd.grad((o_grad * probe).sum() + S_grad.sum(), tracked)
    grads_ref = torch.autograd.grad((o_r * probe).sum() + S_r.sum(), tracked)
    for a, b in zip(grads, grads_ref):
        assert relative_error(a, b) <= 1e-10


@pytest.mark.parametrize("layer", FORMS)
def test_strided_inputs_read_in_place_and_left_unchanged(layer):
    """The blocks are views of the caller's tensors: heads-first tensors seen through a transpose, or a slice of a
    longer sequence, give what contiguous copies give, and no input (nor the initial state) is written to."""
    args, S0 = inputs(layer, T=40)
    strided = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in args]  # (B, T, H, ·) views of (B, H, T, ·)
    longer = [torch.cat([x, x.flip(1)], dim=1)[:, :40] for x in args]  # the first 40 tokens of 80
    before = [x.clone() for x in args] + [S0.clone()]
    with torch.no_grad():
        expected = run(layer, args, S0, chunk_size=16)
        for variant in (strided, longer):
            assert not variant[0].is_contiguous() or variant is longer
            o, S = run(layer, variant, S0, chunk_size=16)
            assert torch.equal(o, expected[0]) and torch.equal(S, expected[1])
    for x, saved in zip(args + [S0], before):
        assert torch.equal(x, saved)


@pytest.mark.parametrize("layer", FORMS)
def test_the_final_state_is_not_a_view_of_a_buffer(layer):
    args, S0 = inputs(layer, T=40)
    with torch.no_grad():
        _, S = run(layer, args, S0, chunk_size=16)
        kept = S.clone()
        run(layer, [x.flip(1) if i < 3 else x for i, x in enumerate(args)], S0, chunk_size=16)  # other q, k, v
    assert torch.equal(S, kept) and S.is_contiguous()


@pytest.mark.parametrize(
    "layer, module", [("gated_linear_attention", linear_attention), ("gated_delta_rule", delta_rule)]
)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_factorised_and_exact_scalar_decays_agree(monkeypatch, layer, module, dtype, tol):
    """Weak decays take the rank-one path (Q γ)(K / γ)ᵀ, strong ones each Γ_ij from its segment sum: forcing either
    on the same weak-decay inputs gives the same result, to rounding."""
    args, S0 = inputs(layer, T=70, dtype=dtype, max_decay=0.1)
    results = []
    for threshold in (0.0, 2.0):  # 0: every block factorised; 2 > any decay: none
        monkeypatch.setattr(module, "MIN_FACTORED_DECAY", threshold)
        with torch.no_grad():
            results.append(run(layer, args, S0, chunk_size=16))
    (o_f, S_f), (o_e, S_e) = results
    assert relative_error(o_f, o_e) < tol and relative_error(S_f, S_e) < tol


@pytest.mark.parametrize("C", [1, 7, 16, 64, 200])
def test_ut_solve_in_place_equals_one_triangular_solve(C):
    """The UT transform's solve reads only the strict lower triangle of ``gram`` (ones on the diagonal); in place
    it overwrites a contiguous right-hand side with the same solution (fp64)."""
    gen = torch.Generator().manual_seed(C)
    gram = torch.randn(3, C, C, generator=gen, dtype=torch.float64) / C**0.5
    rhs = torch.randn(3, C, 5, generator=gen, dtype=torch.float64)
    L = gram.tril(-1) + torch.eye(C, dtype=torch.float64)
    expected = torch.linalg.solve_triangular(L, rhs, upper=False)
    assert torch.allclose(delta_rule.ut_solve(gram, rhs), expected, rtol=1e-10, atol=1e-10)
    in_place = rhs.clone()
    assert delta_rule.ut_solve(gram, in_place, in_place=True).data_ptr() == in_place.data_ptr()
    assert torch.allclose(in_place, expected, rtol=1e-10, atol=1e-10)


def test_chunk_blocks_are_views_and_only_the_tail_is_copied():
    x = torch.randn(2, 21, 3, 4)
    blocks = list(_chunking.chunk_blocks([x], chunk_size=4, per_block=2))
    assert [(t0, t1) for t0, t1, _ in blocks] == [(0, 8), (8, 16), (16, 20), (20, 21)]
    for t0, t1, (view,) in blocks[:-1]:
        assert view.shape == ((t1 - t0) // 4, 2, 3, 4, 4) and view.data_ptr() == x[:, t0].data_ptr()
        assert torch.equal(view, x[:, t0:t1].unflatten(1, (-1, 4)).permute(1, 0, 3, 2, 4))
    _, _, (tail,) = blocks[-1]
    assert tail.shape == (1, 2, 3, 4, 4) and torch.equal(tail[0, :, :, 0], x[:, 20]) and not tail[0, :, :, 1:].any()
