"""The framework's new choices: each named layer equals its op, the limiting cases hold, the Gates behave as the ops."""

import math

import pytest
import torch

from tests.helpers import fla_inputs, relative_error
from ttr_edu.ops import (
    delta_product_recurrent,
    gated_delta_rule_recurrent,
    gated_linear_attention_recurrent,
    l2_norm,
    longhorn_recurrent,
    rls_recurrent,
    titans_recurrent,
    ttt_linear_recurrent,
    ttt_mlp_recurrent,
)
from ttr_edu.regression import (
    MLP,
    ConjugateGradient,
    ExactSolve,
    Gates,
    KernelRidge,
    Linear,
    MiniBatchGD,
    MomentumSGD,
    OnlineSGD,
    RecursiveLeastSquares,
    StepsPerToken,
    TestTimeRegression,
    Uniform,
    named_layer,
    regression_weights,
)

B, T, H, D_k, D_v = 2, 13, 2, 4, 3


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def inputs(n=1, seed=0):
    q = rand(B, T, H, D_k, seed=seed)
    k = l2_norm(rand(B, T * n, H, D_k, seed=seed + 1))
    v = rand(B, T * n, H, D_v, seed=seed + 2)
    beta = torch.rand(B, T * n, H, generator=torch.Generator().manual_seed(seed + 3), dtype=torch.float64)
    return q, k, v, beta


def gate(seed=4, shape=(B, T, H)):
    return -0.3 * torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def mlp_weights(D_h=6, seed=7):
    return (0.5 * rand(B, H, D_k, D_h, seed=seed), 0.5 * rand(B, H, D_h, D_v, seed=seed + 1))


def assert_equal(a, b, tol=1e-10):
    err = relative_error(a, b)
    assert err <= tol, f"relative error {err:.3g} > {tol}"


# ---- each named layer equals its op (fp64, ≤ 1e-10) -------------------------------------------------------------


def test_longhorn_layer_equals_its_op():
    q, k, v, beta = inputs()
    beta = 4 * beta
    o, S = named_layer("longhorn")(q, k, v, beta=beta, output_final_state=True)
    o_op, S_op = longhorn_recurrent(q, k, v, beta, output_final_state=True)
    assert_equal(o, o_op)
    assert_equal(S, S_op)


@pytest.mark.parametrize("gated", [False, True])
def test_deltaproduct_layer_equals_its_op(gated):
    q, k, v, beta = inputs(n=2)
    g = gate() if gated else None
    layer = named_layer("gated_deltaproduct" if gated else "deltaproduct", num_householder=2, chunk_size=5)
    o, S = layer(q, k, v, beta=beta, g=g, output_final_state=True)
    o_op, S_op = delta_product_recurrent(q, k, v, beta, 2, g=g, output_final_state=True)
    assert_equal(o, o_op)
    assert_equal(S, S_op)


def test_ttt_layers_equal_their_ops():
    q, k, v, beta = inputs()
    o, S = named_layer("ttt_linear", mini_batch_size=4)(q, k, v, beta=beta, output_final_state=True)
    o_op, S_op = ttt_linear_recurrent(q, k, v, beta, 4, output_final_state=True)
    assert_equal(o, o_op)
    assert_equal(S, S_op)
    W = mlp_weights()
    o, (W1, W2) = named_layer("ttt_mlp", mini_batch_size=4)(
        q, k, v, beta=beta, initial_state=W, output_final_state=True
    )
    o_op, (W1_op, W2_op) = ttt_mlp_recurrent(q, k, v, beta, 4, initial_state=W, output_final_state=True)
    assert_equal(o, o_op)
    assert_equal(W1, W1_op)
    assert_equal(W2, W2_op)


@pytest.mark.parametrize("wrap", [{"layer_norm": True}, {"residual": True}, {"layer_norm": True, "residual": True}])
@pytest.mark.parametrize("mini_batch_size", [1, 4, 16])
def test_ttt_mlp_layer_equals_its_op_with_layer_norm_and_residual(wrap, mini_batch_size):
    """The generic path reads its gradients off autodiff through whatever the MLP wraps around its maps."""
    q, k, v, beta = inputs()
    v = rand(B, T, H, D_k, seed=12)  # the residual needs D_v == D_k
    W = (0.5 * rand(B, H, D_k, 6, seed=7), 0.5 * rand(B, H, 6, D_k, seed=8))
    layer = TestTimeRegression(weights=Uniform(), function_class=MLP(**wrap), optimizer=MiniBatchGD(mini_batch_size))
    o, (W1, W2) = layer(q, k, v, beta=beta, initial_state=W, output_final_state=True)
    o_op, (W1_op, W2_op) = ttt_mlp_recurrent(
        q, k, v, beta, mini_batch_size, initial_state=W, output_final_state=True, **wrap
    )
    for a, b in ((o, o_op), (W1, W1_op), (W2, W2_op)):
        assert_equal(a, b)


@pytest.mark.parametrize("layer", ["ttt_mlp", "titans"])
def test_mlp_memories_differentiate_like_their_ops(layer):
    """An outer model trains through the inner steps: the generic path's gradients with respect to every input and
    the starting weights equal the op's (fp64), and ``torch.no_grad`` gives the same outputs."""
    q, k, v, beta = inputs()
    eta = torch.rand(B, T, H, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    alpha = 0.2 * torch.rand(B, T, H, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    W = mlp_weights()
    if layer == "ttt_mlp":
        generic = lambda q, k, v, beta, W1, W2: named_layer("ttt_mlp", mini_batch_size=4)(
            q, k, v, beta=beta, initial_state=(W1, W2)
        )[0]
        op = lambda q, k, v, beta, W1, W2: ttt_mlp_recurrent(q, k, v, beta, 4, initial_state=(W1, W2))[0]
    else:
        gates = lambda beta: [x[tuple(slice(n) for n in beta.shape)] for x in (eta, alpha)]

        def generic(q, k, v, beta, W1, W2):
            e, a = gates(beta)
            return named_layer("titans")(q, k, v, beta=beta, eta=e, alpha=a, initial_state=(W1, W2))[0]

        def op(q, k, v, beta, W1, W2):
            return titans_recurrent(q, k, v, beta, *gates(beta), initial_state=(W1, W2))[0]

    args = [x.clone().requires_grad_() for x in (q, k, v, beta, *W)]
    cotangent = rand(*q.shape[:3], D_v, seed=21)
    grads = [torch.autograd.grad((fn(*args) * cotangent).sum(), args) for fn in (generic, op)]
    for a, b in zip(*grads):
        assert_equal(a, b)
    with torch.no_grad():
        assert_equal(generic(q, k, v, beta, *W), op(q, k, v, beta, *W))
    small = [x[:1, :5, :1].clone().requires_grad_() for x in (q, k, v, beta)] + [
        w[:1, :1].clone().requires_grad_() for w in W
    ]
    assert torch.autograd.gradcheck(generic, small)


def test_generic_mlp_path_double_backward_with_layer_norm():
    """Meta-learning differentiates the inner gradient twice: gradgradcheck of the generic path with the inner
    LayerNorm (``F.layer_norm``'s fused double backward got this wrong, pytorch/pytorch#175754)."""
    gen = torch.Generator().manual_seed(0)
    x = [torch.randn(1, 3, 1, 3, generator=gen, dtype=torch.float64) for _ in range(3)]
    x += [
        0.3 * torch.rand(1, 3, 1, generator=gen, dtype=torch.float64),
        0.4 * torch.randn(1, 1, 3, 4, generator=gen, dtype=torch.float64),
        0.4 * torch.randn(1, 1, 4, 3, generator=gen, dtype=torch.float64),
    ]
    layer = TestTimeRegression(weights=Uniform(), function_class=MLP(layer_norm=True), optimizer=MiniBatchGD(2))
    f = lambda q, k, v, b, W1, W2: layer(q, k, v, beta=b, initial_state=(W1, W2))[0]
    assert torch.autograd.gradgradcheck(f, [t.requires_grad_() for t in x])


def test_generic_mlp_path_handles_huge_batches_plain_calls_and_inference_mode():
    q, k, v, beta = inputs()
    W = mlp_weights()
    op = ttt_mlp_recurrent(q, k, v, beta, 10**6, initial_state=W)[0]
    o = named_layer("ttt_mlp", mini_batch_size=10**6)(q, k, v, beta=beta, initial_state=W)[0]  # one mini-batch of T
    assert_equal(o, op)
    assert not o.requires_grad  # grad mode on, nothing needs a gradient: no graph is kept through the steps
    with torch.inference_mode():
        assert_equal(
            named_layer("ttt_mlp", mini_batch_size=4)(q, k, v, beta=beta, initial_state=W)[0],
            ttt_mlp_recurrent(q, k, v, beta, 4, initial_state=W)[0],
        )
        step = 0.5 * beta
        assert_equal(
            named_layer("titans")(q, k, v, beta=step, initial_state=W)[0],
            titans_recurrent(q, k, v, step, torch.zeros_like(step), torch.zeros_like(step), initial_state=W)[0],
        )


@pytest.mark.parametrize("memory", ["linear", "mlp"])
def test_titans_layer_equals_its_op(memory):
    q, k, v, step = inputs()
    eta = torch.rand(B, T, H, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    alpha = 0.2 * torch.rand(B, T, H, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    if memory == "mlp":
        layer, init = named_layer("titans"), mlp_weights()
    else:
        layer = TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=MomentumSGD())
        init = rand(B, H, D_k, D_v, seed=5)
    o, mem = layer(q, k, v, beta=step, eta=eta, alpha=alpha, initial_state=init, output_final_state=True)
    o_op, state = titans_recurrent(q, k, v, step, eta, alpha, initial_state=init, output_final_state=True)
    assert_equal(o, o_op)
    for a, b in zip(mem if memory == "mlp" else (mem,), state.memory if memory == "mlp" else (state.memory,)):
        assert_equal(a, b)


# ---- limiting cases ----------------------------------------------------------------------------------------------


def test_ttt_with_mini_batch_one_is_deltanet():
    q, k, v, beta = inputs()
    ttt = TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=MiniBatchGD(mini_batch_size=1))
    assert_equal(ttt(q, k, v, beta=beta)[0], named_layer("deltanet")(q, k, v, beta=beta)[0])
    assert (
        relative_error(
            named_layer("ttt_linear", mini_batch_size=4)(q, k, v, beta=beta)[0],
            named_layer("deltanet")(q, k, v, beta=beta)[0],
        )
        > 1e-3
    )


def test_titans_linear_without_momentum_or_decay_is_deltanet():
    q, k, v, beta = inputs()
    titans = TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=MomentumSGD(0.0, 0.0))
    assert_equal(titans(q, k, v, beta=beta)[0], named_layer("deltanet")(q, k, v, beta=beta)[0])
    with_momentum = TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=MomentumSGD(0.5, 0.0))
    assert relative_error(with_momentum(q, k, v, beta=beta)[0], named_layer("deltanet")(q, k, v, beta=beta)[0]) > 1e-3


@pytest.mark.parametrize("gated", [False, True])
def test_conjugate_gradients_with_D_k_steps_are_the_exact_solve(gated):
    q, k, v, _ = inputs()
    g = gate() if gated else None
    weights = Gates() if gated else Uniform()
    exact = TestTimeRegression(weights=weights, function_class=Linear(), optimizer=ExactSolve(ridge=0.1))
    o_exact, S_exact = exact(q, k, v, g=g, output_final_state=True)
    errors = []
    for steps in range(1, D_k + 1):
        cg = TestTimeRegression(weights=weights, function_class=Linear(), optimizer=ConjugateGradient(steps, 0.1))
        o, S = cg(q, k, v, g=g, output_final_state=True)
        errors.append(relative_error(o, o_exact))
    assert errors[-1] < 1e-10 and relative_error(S, S_exact) < 1e-10
    assert errors[0] > 1e-3  # one step is not enough: the test can tell


def test_conjugate_gradients_stop_at_the_rounding_level_of_the_dtype_not_at_D_k_steps():
    """An ill-conditioned key covariance (condition number about 10⁶: large keys, strong decay, ridge 1e-3) loses
    the directions' conjugacy: D_k steps left fp64 4e-6 from the exact solve. The solver now stops at fp64's rounding
    level, within the default 8 steps."""
    a = fla_inputs(1, 6, 1, 4, 2, dtype=torch.float64, max_decay=3.0, seed=187, key_norm="raw")
    q, k, v, g = a["q"], 10 * a["k"], a["v"], a["g"]
    cg, S_cg = named_layer("mesa_cg")(q, k, v, g=g, output_final_state=True)
    exact, S_exact = named_layer("mesa", ridge=1e-3)(q, k, v, g=g, output_final_state=True)
    assert relative_error(cg, exact) < 1e-9 and relative_error(S_cg, S_exact) < 1e-9


def test_conjugate_gradients_in_floating_point_can_need_more_than_D_k_steps():
    """What ``ConjugateGradient``'s docstring says of rounding: with 32-dimensional keys and ridge 1e-3, D_k steps
    stop short of Mesa in fp64, 2 D_k steps reach its rounding level, and 8 steps are further off than zeros."""
    a = fla_inputs(1, 48, 2, 32, 8, dtype=torch.float64, seed=3, max_decay=1.0)
    q, k, v, g = a["q"], a["k"], a["v"], a["g"]
    exact, _ = named_layer("mesa", ridge=1e-3)(q, k, v, g=g)
    error = {
        s: relative_error(named_layer("mesa_cg", steps=s, ridge=1e-3)(q, k, v, g=g)[0], exact) for s in (8, 32, 64)
    }
    assert error[64] < 1e-10 < 1e-7 < error[32] and error[8] > 1, error


def test_longhorn_is_the_delta_rule_at_the_transformed_step():
    q, k, v, beta = inputs()
    k = 3 * k
    beta = 5 * beta
    eps = beta / (1 + beta * k.pow(2).sum(-1))
    assert_equal(named_layer("longhorn")(q, k, v, beta=beta)[0], named_layer("deltanet")(q, k, v, beta=eps)[0])


def test_mlp_online_sgd_is_mini_batch_one():
    q, k, v, beta = inputs()
    W = mlp_weights()
    online = TestTimeRegression(weights=Uniform(), function_class=MLP(), optimizer=OnlineSGD())
    assert_equal(
        online(q, k, v, beta=beta, initial_state=W)[0], ttt_mlp_recurrent(q, k, v, beta, 1, initial_state=W)[0]
    )


# ---- gated DeltaNet read two ways ---------------------------------------------------------------------------------


def two_readings(q, k, v, beta, g):
    """Gates × OnlineSGD (decay, then the step at the decayed state) vs SGD with weight decay ``α = 1 − exp(g)``."""
    gdn = named_layer("gated_deltanet")(q, k, v, beta=beta, g=g)[0]
    sgd_wd = TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=MomentumSGD())
    return gdn, sgd_wd(q, k, v, beta=beta, eta=torch.zeros_like(g), alpha=1 - g.exp())[0]


def test_gated_deltanet_two_readings_agree_without_decay_or_with_fresh_keys():
    q, k, v, beta = inputs()
    a, b = two_readings(q, k, v, beta, torch.zeros(B, T, H, dtype=torch.float64))
    assert_equal(a, b)
    # Each step differs by β(1 − a) k kᵀ S_{t−1}: zero when every key is orthogonal to what is stored.
    k_onehot = torch.eye(D_k, dtype=torch.float64)[torch.arange(D_k)][None, :, None].expand(B, D_k, H, D_k)
    a, b = two_readings(q[:, :D_k], k_onehot.contiguous(), v[:, :D_k], beta[:, :D_k], gate()[:, :D_k])
    assert_equal(a, b)


def test_gated_deltanet_two_readings_differ_with_decay_and_repeated_keys():
    q, k, v, beta = inputs()
    a, b = two_readings(q, k, v, beta, gate())
    assert relative_error(a, b) > 1e-3


# ---- Gates behave as the ops --------------------------------------------------------------------------------------


def test_gates_reset_is_exact():
    q, k, v, beta = inputs()
    g = gate()
    g[:, 6] = -math.inf
    for name, op in (
        ("gated_linear_attention", gated_linear_attention_recurrent),
        ("gated_deltanet", gated_delta_rule_recurrent),
    ):
        kw = {"beta": beta} if name == "gated_deltanet" else {}
        o, _ = named_layer(name)(q, k, v, g=g, **kw)
        assert torch.isfinite(o).all()
        kw_rest = {key: x[:, 6:] for key, x in kw.items()}
        fresh, _ = named_layer(name)(q[:, 6:], k[:, 6:], v[:, 6:], g=g[:, 6:].clamp(min=-1e9), **kw_rest)
        assert_equal(o[:, 6:], fresh, 1e-12)
        o_op, _ = op(q, k, v, g, beta) if name == "gated_deltanet" else op(q, k, v, g)
        assert_equal(o, o_op)
    o, _ = named_layer("mesa_cg", steps=D_k)(q, k, v, g=g)
    g_rest = g[:, 6:].clone()
    g_rest[:, 0] = 0.0  # a fresh start: nothing before it to decay
    fresh, _ = named_layer("mesa_cg", steps=D_k)(q[:, 6:], k[:, 6:], v[:, 6:], g=g_rest)
    assert_equal(o[:, 6:], fresh, 1e-9)
    o, _ = named_layer("mesa")(q, k, v, g=g)  # Mesa's ridge is constant: a reset leaves A_t ⪰ λI, exact again
    assert_equal(o[:, 6:], named_layer("mesa")(q[:, 6:], k[:, 6:], v[:, 6:], g=g_rest)[0], 1e-9)
    assert_equal(o, rls_recurrent(q, k, v, g=g)[0])
    forgetting = TestTimeRegression(Gates(), Linear(), RecursiveLeastSquares())
    with pytest.raises(ValueError, match="g: RecursiveLeastSquares decays its ridge"):
        forgetting(q, k, v, g=g)


def test_nan_g_is_refused_by_name():
    q, k, v, beta = inputs()
    g = gate()
    g[0, 3, 1] = math.nan
    with pytest.raises(ValueError, match=r"g: expected a log decay in \[-inf, 0\]"):
        named_layer("gated_linear_attention")(q, k, v, g=g)
    with pytest.raises(ValueError, match="g: expected a log decay"):
        regression_weights(g)


def test_very_negative_g_is_exact():
    g = torch.full((1, 40, 1), -0.01, dtype=torch.float64)
    g[:, :10] = -1e15  # a cumulative sum of this size leaves no digits for the small segments after it
    gamma = regression_weights(g)[0, 0]
    assert abs(gamma[30, 20].item() - math.exp(-0.1)) < 1e-15
    assert gamma[30, 5].item() == 0.0
    q, k, v, _ = inputs()
    g = gate()
    g[:, :4] = -1e15
    o, _ = named_layer("gated_linear_attention")(q, k, v, g=g)
    assert_equal(o, gated_linear_attention_recurrent(q, k, v, g)[0])


# ---- kernel ridge regression ---------------------------------------------------------------------------------------


def test_kernel_ridge_is_the_representer_solution():
    q, k, v, _ = inputs()
    scale, lam = 0.7, 0.05
    o = named_layer("kernel_ridge", ridge=lam)(q, k, v, scale=scale)[0]
    kappa = lambda x, y: torch.exp(-scale * (x - y).pow(2).sum(-1) / 2)
    for b, h, t in ((0, 0, 0), (1, 1, 7), (0, 1, T - 1)):
        K = kappa(k[b, : t + 1, h, None], k[b, None, : t + 1, h])
        coef = torch.linalg.solve(K + lam * torch.eye(t + 1, dtype=torch.float64), v[b, : t + 1, h])
        assert_equal(o[b, t, h], kappa(q[b, t, h], k[b, : t + 1, h]) @ coef)
    # A vanishing ridge interpolates: each stored key gives back its value.
    fit = TestTimeRegression(weights=Uniform(), function_class=KernelRidge(), optimizer=ExactSolve(ridge=1e-9))
    assert_equal(fit(k, k, v, scale=scale)[0][:, -1], v[:, -1], 1e-5)


# ---- bad input -----------------------------------------------------------------------------------------------------


def test_bad_combinations_and_inputs_are_named():
    q, k, v, beta = inputs()
    with pytest.raises(ValueError, match="optimizer: the MLP memory has no closed form"):
        TestTimeRegression(weights=Uniform(), function_class=MLP(), optimizer=ExactSolve())
    with pytest.raises(ValueError, match="weights: MiniBatchGD"):
        TestTimeRegression(weights=Gates(), function_class=Linear(), optimizer=MiniBatchGD())
    with pytest.raises(ValueError, match="optimizer: KernelRidge is a local"):
        TestTimeRegression(weights=Uniform(), function_class=KernelRidge(), optimizer=OnlineSGD())
    with pytest.raises(ValueError, match="initial_state: the MLP memory needs"):
        named_layer("ttt_mlp")(q, k, v, beta=beta)
    with pytest.raises(ValueError, match="eta: only optimizer=MomentumSGD"):
        named_layer("deltanet")(q, k, v, beta=beta, eta=beta)
    with pytest.raises(ValueError, match=r"alpha: expected a weight decay in \[0, 1\]"):
        named_layer("titans")(q, k, v, beta=beta, alpha=beta + 2, initial_state=mlp_weights())
    with pytest.raises(ValueError, match=r"k: expected shape \(B, T·num_householder, H, D_k\)"):
        named_layer("deltaproduct")(q, k, v, beta=beta)
    with pytest.raises(TypeError, match="num_householder"):
        TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=StepsPerToken(num_householder=1.5))
    with pytest.raises(TypeError, match="layer_norm: expected a bool"):
        MLP(layer_norm="false")
    with pytest.raises(ValueError, match="kernel"):
        KernelRidge(kernel="cosine")
