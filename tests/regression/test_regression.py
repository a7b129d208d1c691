"""The test-time regression framework: each named layer equals its specialised op; invalid choices say why."""

import math

import pytest
import torch

from tests.helpers import fla_inputs, relative_error
from ttr_edu import ops
from ttr_edu.regression import (
    NAMED_LAYERS,
    ExactSolve,
    ExponentialDecay,
    Gates,
    GradientStep,
    Linear,
    LocalConstant,
    LocalLinear,
    MultiPassSGD,
    OnlineSGD,
    RecursiveLeastSquares,
    TestTimeRegression,
    Uniform,
    decayed_cumsum,
    named_layer,
    regression_weights,
)

B, T, H, D_K, D_V = 2, 11, 2, 5, 3  # T is not a multiple of any chunk size used below


def inputs(seed=0, dtype=torch.float64, t=T):
    x = fla_inputs(B, t, H, D_K, D_V, dtype=dtype, seed=seed, beta=(0.0, 1.0), max_decay=0.5)
    return x["q"], x["k"], x["v"], x["beta"], x["g"]


def close(a, b, tol=1e-10):
    assert relative_error(a, b) < tol, relative_error(a, b)


# ---- each named layer equals the op ----------------------------------------------------------------------------


def test_linear_attention_is_one_gradient_step_from_zero():
    q, k, v, _, _ = inputs()
    S0 = torch.randn(B, H, D_K, D_V, dtype=torch.float64)
    o, S = named_layer("linear_attention")(q, k, v, initial_state=S0, output_final_state=True)
    o_op, S_op = ops.linear_attention_chunk(q, k, v, initial_state=S0, output_final_state=True, chunk_size=4)
    close(o, o_op)
    close(S, S_op)


def test_gated_linear_attention_is_a_weighted_gradient_step():
    q, k, v, _, g = inputs(1)
    S0 = torch.randn(B, H, D_K, D_V, dtype=torch.float64)
    o, S = named_layer("gated_linear_attention")(q, k, v, g=g, initial_state=S0, output_final_state=True)
    o_op, S_op = ops.gated_linear_attention_chunk(q, k, v, g, initial_state=S0, output_final_state=True, chunk_size=4)
    close(o, o_op)
    close(S, S_op)


def test_deltanet_is_online_sgd():
    q, k, v, beta, _ = inputs(2)
    S0 = torch.randn(B, H, D_K, D_V, dtype=torch.float64)
    o, S = named_layer("deltanet")(q, k, v, beta=beta, initial_state=S0, output_final_state=True)
    o_op, S_op = ops.delta_rule_chunk(q, k, v, beta, initial_state=S0, output_final_state=True, chunk_size=4)
    close(o, o_op)
    close(S, S_op)


def test_gated_deltanet_is_online_sgd_after_decay():
    q, k, v, beta, g = inputs(3)
    o, S = named_layer("gated_deltanet")(q, k, v, beta=beta, g=g, output_final_state=True)
    o_op, S_op = ops.gated_delta_rule_chunk(q, k, v, g, beta, output_final_state=True, chunk_size=4)
    close(o, o_op)
    close(S, S_op)


def test_rls_and_exact_solve_equal_the_rls_ops():
    q, k, v, _, _ = inputs(4)
    o_op, (S_op, _) = ops.rls_recurrent(q, k, v, ridge=0.3, output_final_state=True)
    for layer in (named_layer("rls", ridge=0.3), TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=0.3))):
        o, S = layer(q, k, v, output_final_state=True)
        close(o, o_op)
        close(S, S_op)
    close(ops.rls_exact(q, k, v, ridge=0.3)[0], o_op)


def test_mesa_is_the_constant_ridge_exact_solve_of_the_gated_rls_ops():
    """named_layer("mesa") keeps the ridge constant (MesaNet): it equals ops.rls_recurrent / rls_exact with g, and
    the forgetting-factor RecursiveLeastSquares under Gates, whose ridge decays with the data, is a different layer."""
    q, k, v, _, g = inputs(5, t=40)
    assert NAMED_LAYERS["mesa"] == (Gates, Linear, ExactSolve)
    o_op, (S_op, _) = ops.rls_recurrent(q, k, v, ridge=0.3, g=g, output_final_state=True)
    o, S = named_layer("mesa", ridge=0.3)(q, k, v, g=g, output_final_state=True)
    close(o, o_op)
    close(S, S_op)
    close(ops.rls_exact(q, k, v, ridge=0.3, g=g)[0], o_op)
    close(named_layer("mesa")(q, k, v, g=g)[0], ops.rls_recurrent(q, k, v, g=g)[0])  # the same default ridge, 1.0
    forgetting = TestTimeRegression(Gates(), Linear(), RecursiveLeastSquares(ridge=0.3))(q, k, v, g=g)[0]
    assert relative_error(forgetting, o_op) > 1e-2  # its ridge has faded to γ_0^{(t)} λ: not Mesa
    # ... and it is the exact solve with that faded ridge, (Σ γ k kᵀ + γ_0^{(t)} λ I)⁻¹ Σ γ k vᵀ, at every t
    for t in (0, 9, 39):
        w = regression_weights(g[:, : t + 1])[:, :, -1]  # (B, H, t+1): γ_i^{(t)}
        faded = 0.3 * g[:, : t + 1].sum(1).exp()  # (B, H): γ_0^{(t)} λ
        A = torch.einsum("bhi,bihk,bihl->bhkl", w, k[:, : t + 1], k[:, : t + 1])
        A = A + faded[..., None, None] * torch.eye(D_K, dtype=A.dtype)
        b = torch.einsum("bhi,bihk,bihv->bhkv", w, k[:, : t + 1], v[:, : t + 1])
        o_t = torch.einsum("bhk,bhkv->bhv", q[:, t] * D_K**-0.5, torch.linalg.solve(A, b))
        close(forgetting[:, t], o_t, 1e-8)


def test_mesa_stays_finite_in_fp32_at_ordinary_gates():
    """g = logσ(0) (half the weight forgotten per token), T = 1024, fp32: the constant ridge keeps A_t ⪰ λI, so Mesa
    stays finite and close to the fp64 op; the forgetting-factor RLS loses its ridge there."""
    gen = torch.Generator().manual_seed(11)
    t = 1024
    q, k = (torch.nn.functional.normalize(torch.randn(1, t, 2, 16, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(1, t, 2, 16, generator=gen)
    g = torch.full((1, t, 2), torch.nn.functional.logsigmoid(torch.tensor(0.0)).item())
    o = named_layer("mesa")(q, k, v, g=g)[0]
    assert o.dtype == torch.float32 and torch.isfinite(o).all()
    reference = ops.rls_exact(q.double(), k.double(), v.double(), g=g.double())[0]  # = rls_recurrent, faster
    assert relative_error(o.double(), reference) < 1e-5
    try:  # NaN (refused by name, naming the output o), or far from Mesa: not the same layer
        forgetting = TestTimeRegression(Gates(), Linear(), RecursiveLeastSquares(ridge=1.0))(q, k, v, g=g)[0]
    except ValueError as error:
        assert str(error).startswith("o: ") and "NaN or inf" in str(error)
    else:
        assert not torch.allclose(forgetting, o, rtol=1e-2, atol=1e-2)


def test_softmax_attention_is_nadaraya_watson():
    q, k, v, _, _ = inputs(6)
    close(named_layer("softmax_attention")(q, k, v)[0], ops.softmax_attention(q, k, v)[0])
    close(named_layer("softmax_attention")(q, k, v, scale=2.5)[0], ops.softmax_attention(q, k, v, scale=2.5)[0])


def test_gaussian_smoother_equals_softmax_attention_only_with_qk_norm():
    q, k, v, _, _ = inputs(7)
    k = 3 * torch.rand(B, T, H, 1, dtype=torch.float64) * k  # keys of different norms
    gaussian = TestTimeRegression(Uniform(), LocalConstant("gaussian"), ExactSolve(ridge=0.0))
    unit = ops.l2_norm
    close(gaussian(unit(q), unit(k), v, scale=4.0)[0], ops.softmax_attention(q, k, v, scale=4.0, qk_norm=True)[0])
    assert relative_error(gaussian(q, k, v, scale=4.0)[0], ops.softmax_attention(q, k, v, scale=4.0)[0]) > 0.05


def test_local_linear_attention_equals_the_op():
    q, k, v, _, _ = inputs(8)
    o = named_layer("local_linear_attention", ridge=0.05)(q, k, v)[0]
    close(o, ops.local_linear_attention(q, k, v, ridge=0.05)[0])


def test_fp32_inputs_compute_in_fp32_and_return_the_input_dtype():
    q, k, v, beta, _ = inputs(9, dtype=torch.float32)
    o, S = named_layer("deltanet")(q, k, v, beta=beta, output_final_state=True)
    assert o.dtype == torch.float32 and S.dtype == torch.float32
    close(o, ops.delta_rule_recurrent(q, k, v, beta)[0], tol=1e-5)


# ---- the framework against the objective itself -----------------------------------------------------------------


def solve_objective(q, k, v, gamma, ridge, scale):
    """Brute force: at every t, solve the weighted ridge regression from its normal equations, read out at q_t."""
    out = torch.empty(B, T, H, D_V, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                w = gamma[b, h, t, : t + 1]
                K, V = k[b, : t + 1, h], v[b, : t + 1, h]
                A = K.T @ (w[:, None] * K) + ridge * torch.eye(D_K, dtype=q.dtype)
                S = torch.linalg.solve(A, K.T @ (w[:, None] * V))
                out[b, t, h] = S.T @ (scale * q[b, t, h])
    return out


def test_exact_solve_with_gates_solves_the_weighted_objective():
    q, k, v, _, g = inputs(10)
    o = TestTimeRegression(Gates(), Linear(), ExactSolve(ridge=0.2))(q, k, v, g=g, scale=1.0)[0]
    close(o, solve_objective(q, k, v, regression_weights(g), 0.2, 1.0))


def test_regression_weights_are_products_of_later_gates():
    _, _, _, _, g = inputs(11)
    gamma = regression_weights(g)
    t, i = 7, 3
    assert torch.allclose(gamma[1, 0, t, i], torch.exp(g[1, i + 1 : t + 1, 0].sum()))
    assert gamma[1, 0, t, t] == 1 and gamma[1, 0, i, t] == 0


def test_decayed_cumsum_matches_the_weight_matrix_across_chunks():
    _, _, _, _, g = inputs(12)
    x = torch.randn(B, H, T, 2, 3, dtype=torch.float64)
    gamma = regression_weights(g)
    want = torch.einsum("bhti,bhixy->bhtxy", gamma, x)
    close(decayed_cumsum(x, g.transpose(1, 2), chunk_size=4), want)


def test_exponential_decay_equals_gates_with_a_constant_gate():
    q, k, v, _, _ = inputs(13)
    g = torch.full((B, T, H), math.log(0.8), dtype=torch.float64)
    fixed = TestTimeRegression(ExponentialDecay(0.8), Linear(), GradientStep())(q, k, v)[0]
    close(fixed, named_layer("gated_linear_attention")(q, k, v, g=g)[0])


def test_one_sgd_pass_is_deltanet_and_many_passes_approach_the_least_squares_answer():
    q, k, v, _, _ = inputs(14)  # T = 11 > D_K = 5: an overdetermined, noisy regression
    beta = torch.full((B, T, H), 0.3, dtype=torch.float64)
    one = TestTimeRegression(Uniform(), Linear(), MultiPassSGD(passes=1))(q, k, v, beta=beta)[0]
    close(one, named_layer("deltanet")(q, k, v, beta=beta)[0])
    # 3 keys in D_K = 5: the regression is consistent and SGD from zero converges to the min-norm fit (Kaczmarz)
    q3, k3, v3, b3 = q[:, :3], k[:, :3], v[:, :3], torch.full((B, 3, H), 0.5, dtype=torch.float64)
    exact = TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=1e-10))(q3, k3, v3)[0]
    gaps = [
        relative_error(TestTimeRegression(Uniform(), Linear(), MultiPassSGD(n))(q3, k3, v3, beta=b3)[0], exact)
        for n in (1, 10, 200)
    ]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-3, gaps


# ---- invalid combinations and bad input --------------------------------------------------------------------------


@pytest.mark.parametrize("opt", [RecursiveLeastSquares(), GradientStep(), OnlineSGD(), MultiPassSGD()])
@pytest.mark.parametrize("cls", [LocalConstant(), LocalLinear()])
def test_local_classes_need_the_closed_form(cls, opt):
    with pytest.raises(ValueError, match="closed form"):
        TestTimeRegression(Uniform(), cls, opt)


@pytest.mark.parametrize("cls", [Linear(), LocalLinear()])
def test_an_inverse_needs_a_positive_ridge(cls):
    with pytest.raises(ValueError, match="ridge > 0"):
        TestTimeRegression(Uniform(), cls, ExactSolve(ridge=0.0))
    with pytest.raises(ValueError, match="ridge"):
        ExactSolve(ridge=-1.0)
    with pytest.raises(ValueError, match="ridge"):
        RecursiveLeastSquares(ridge=0.0)


def test_wrong_kinds_of_choice_raise_type_error():
    with pytest.raises(TypeError, match="weights"):
        TestTimeRegression(Linear(), Linear(), GradientStep())
    with pytest.raises(TypeError, match="optimizer"):
        TestTimeRegression(Uniform(), Linear(), "sgd")


def test_missing_or_superfluous_beta_and_g_are_named():
    q, k, v, beta, g = inputs(15)
    with pytest.raises(ValueError, match="beta"):
        named_layer("deltanet")(q, k, v)
    with pytest.raises(ValueError, match="beta"):
        named_layer("linear_attention")(q, k, v, beta=beta)
    with pytest.raises(ValueError, match="g: weights=Gates"):
        named_layer("gated_deltanet")(q, k, v, beta=beta)
    with pytest.raises(ValueError, match="g: weights=Uniform"):
        named_layer("deltanet")(q, k, v, beta=beta, g=g)
    with pytest.raises(ValueError, match="g: expected a log decay in"):
        named_layer("gated_linear_attention")(q, k, v, g=-g)


def test_shape_errors_name_the_argument_and_dims():
    q, k, v, beta, _ = inputs(16)
    with pytest.raises(ValueError, match=r"k: expected shape \(B, T, H, D_k\)"):
        named_layer("linear_attention")(q, k[:, :-1], v)
    with pytest.raises(ValueError, match="beta"):
        named_layer("deltanet")(q, k, v, beta=beta[:, :, :1])
    with pytest.raises(TypeError, match="v: expected the dtype of q"):
        named_layer("linear_attention")(q, k, v.float())
    with pytest.raises(TypeError, match="beta: expected a torch.Tensor"):
        named_layer("deltanet")(q, k, v, beta=0.5)


def test_states_a_class_does_not_keep_are_refused_with_the_reason():
    q, k, v, _, _ = inputs(17)
    with pytest.raises(ValueError, match="key-value cache"):
        named_layer("softmax_attention")(q, k, v, output_final_state=True)
    with pytest.raises(ValueError, match="initial_state"):
        named_layer("rls")(q, k, v, initial_state=torch.zeros(B, H, D_K, D_V, dtype=torch.float64))


def test_local_linear_with_fewer_points_than_dims_is_regularised_not_nan():
    q, k, v, _, _ = inputs(18, t=3)  # 3 points in D_K = 5: the local covariance is singular
    o = TestTimeRegression(Uniform(), LocalLinear(), ExactSolve(ridge=1e-8))(q, k, v)[0]
    assert torch.isfinite(o).all()
    close(o[:, 0], v[:, 0], tol=1e-6)  # one point: the fit is that point's value (up to the ridge)


def test_singular_key_covariance_is_handled_by_the_ridge():
    q, k, v, _, _ = inputs(19)
    k = k[:, :, :, :1].expand(B, T, H, D_K).contiguous()  # every key on one line: rank-1 covariance
    o = TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=1e-6))(q, k, v)[0]
    assert torch.isfinite(o).all()


def test_readouts_across_chunk_boundaries_match_the_ops():
    gen = torch.Generator().manual_seed(20)
    q, k, v = (torch.randn(1, 150, 2, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    k = ops.l2_norm(k)
    g = -0.2 * torch.rand(1, 150, 2, generator=gen, dtype=torch.float64)
    close(named_layer("linear_attention")(q, k, v)[0], ops.linear_attention_recurrent(q, k, v)[0])
    close(named_layer("gated_linear_attention")(q, k, v, g=g)[0], ops.gated_linear_attention_recurrent(q, k, v, g)[0])
    exact = TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=0.5))(q, k, v, output_final_state=True)
    o_op, (S_op, _) = ops.rls_recurrent(q, k, v, ridge=0.5, output_final_state=True)
    close(exact[0], o_op)
    close(exact[1], S_op)


def test_predict_answers_queries_from_all_pairs_without_writing_them():
    gen = torch.Generator().manual_seed(21)
    k, v, queries = (torch.randn(n, d, generator=gen, dtype=torch.float64) for n, d in ((7, 4), (7, 3), (5, 4)))
    rls = TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=0.1))
    S = torch.linalg.solve(k.T @ k + 0.1 * torch.eye(4, dtype=torch.float64), k.T @ v)
    close(rls.predict(k, v, queries, scale=1.0), queries @ S)
    smoother = TestTimeRegression(Uniform(), LocalConstant("gaussian"), ExactSolve(ridge=0.0))
    w = torch.softmax(-0.5 * torch.cdist(queries, k) ** 2, dim=-1)
    close(smoother.predict(k, v, queries, scale=1.0), w @ v)
    with pytest.raises(ValueError, match="queries"):
        rls.predict(k, v, queries[:, :3])


def test_local_linear_with_a_gaussian_kernel_recovers_a_line_exactly():
    x = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
    y = 3 * x - 1  # a line: local linear regression has no bias on it, even at the edges
    edge = torch.tensor([[0.0], [1.0], [1.2]], dtype=torch.float64)
    local_linear = TestTimeRegression(Uniform(), LocalLinear("gaussian"), ExactSolve(ridge=1e-9))
    close(local_linear.predict(x, y, edge, scale=100.0), 3 * edge - 1, tol=1e-6)
    nadaraya_watson = TestTimeRegression(Uniform(), LocalConstant("gaussian"), ExactSolve(ridge=0.0))
    assert relative_error(nadaraya_watson.predict(x, y, edge, scale=100.0), 3 * edge - 1) > 0.05  # biased at edges


def test_initial_state_fades_alike_in_one_online_pass_and_one_multi_pass():
    q, k, v, beta, _ = inputs(22)
    S0 = torch.randn(B, H, D_K, D_V, dtype=torch.float64)
    online = TestTimeRegression(Uniform(), Linear(), OnlineSGD())(q, k, v, beta=beta, initial_state=S0)[0]
    one_pass = TestTimeRegression(Uniform(), Linear(), MultiPassSGD(1))(q, k, v, beta=beta, initial_state=S0)[0]
    close(one_pass, online)


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_online_sgd_in_chunks_equals_the_step_by_step_delta_rule(chunk_size):
    """The chunk's errors from one triangular solve equal the steps taken one by one (the recurrent ops), for a
    chunk of one step, ragged chunks (T = 11) and one chunk longer than T; with gates, including a full reset."""
    q, k, v, beta, g = inputs(23)
    g = g.clone()
    g[:, 5] = -math.inf  # α = 0 at t = 5: everything written before is forgotten
    S0 = torch.randn(B, H, D_K, D_V, dtype=torch.float64)
    plain = TestTimeRegression(Uniform(), Linear(), OnlineSGD(chunk_size))
    gated = TestTimeRegression(Gates(), Linear(), OnlineSGD(chunk_size))
    o, S = plain(q, k, v, beta=beta, initial_state=S0, output_final_state=True)
    o_ref, S_ref = ops.delta_rule_recurrent(q, k, v, beta, initial_state=S0, output_final_state=True)
    close(o, o_ref)
    close(S, S_ref)
    o, S = gated(q, k, v, beta=beta, g=g, initial_state=S0, output_final_state=True)
    o_ref, S_ref = ops.gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    assert torch.isfinite(o).all()
    close(o, o_ref)
    close(S, S_ref)


@pytest.mark.parametrize(
    ("chunk_size", "error"), [(0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError)]
)
def test_online_sgd_refuses_a_bad_chunk_size(chunk_size, error):
    with pytest.raises(error, match="chunk_size"):
        OnlineSGD(chunk_size)


@pytest.mark.parametrize("optimizer", [OnlineSGD(), GradientStep(), ExactSolve()])
def test_an_empty_sequence_is_refused_by_name(optimizer):
    q, k, v, beta, _ = inputs(24, t=0)
    with pytest.raises(ValueError, match="q: expected T >= 1"):
        TestTimeRegression(Uniform(), Linear(), optimizer)(q, k, v, beta=beta)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: named_layer("linear_attention")(*(torch.randn(0, 5, 1, 8),) * 3), ValueError, "B >= 1"),
        (lambda: named_layer("linear_attention")(*(torch.randn(1, 5, 0, 8),) * 3), ValueError, "H >= 1"),
        (
            lambda: named_layer("linear_attention")(
                torch.full((1, 3, 1, 4), float("nan")), torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4)
            ),
            ValueError,
            "q: expected finite",
        ),
        (
            lambda: named_layer("deltanet").predict(
                torch.randn(6, 4), torch.randn(6, 4), torch.randn(3, 4).to("meta"), beta=torch.rand(6)
            ),
            ValueError,
            "one device",
        ),
        (
            lambda: named_layer("deltanet").predict(
                torch.randn(6, 4), torch.randn(6, 4), torch.randn(3, 4), beta=[0.5] * 6
            ),
            TypeError,
            "beta",
        ),
        (
            lambda: named_layer("deltanet").predict(
                torch.randn(6, 4), torch.randn(6, 4), torch.randn(3, 4), beta=torch.rand(5)
            ),
            ValueError,
            "beta",
        ),
    ],
    ids=["empty batch", "no heads", "NaN query", "meta queries", "list beta", "short beta"],
)
def test_framework_refuses_empty_non_finite_and_mismatched_inputs_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_named_layer_refuses_unknown_names_and_a_ridge_it_has_no_use_for():
    with pytest.raises(ValueError, match="name: unknown layer 'mamba'; valid names are linear_attention"):
        named_layer("mamba")
    for name in ("softmax_attention", "deltanet"):
        with pytest.raises(ValueError, match=f"ridge: {name} inverts nothing"):
            named_layer(name, ridge=0.1)
