"""Sliding-window weights: the memory at step t fits the last w pairs only, for every optimiser and class."""

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu import ops
from ttr_edu.regression import (
    MLP,
    ConjugateGradient,
    ExactSolve,
    GradientStep,
    ImplicitStep,
    KernelRidge,
    Linear,
    LocalConstant,
    LocalLinear,
    MiniBatchGD,
    MomentumSGD,
    OnlineSGD,
    RecursiveLeastSquares,
    SlidingWindow,
    StepsPerToken,
    TestTimeRegression,
    Uniform,
)

B, T, H, D_K, D_V = 2, 11, 2, 4, 3


def _inputs(seed=0, rows=1):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D_K, generator=gen, dtype=torch.float64)
    k = ops.l2_norm(torch.randn(B, T * rows, H, D_K, generator=gen, dtype=torch.float64))
    v = torch.randn(B, T * rows, H, D_V, generator=gen, dtype=torch.float64)
    beta = 0.2 + 0.6 * torch.rand(B, T * rows, H, generator=gen, dtype=torch.float64)
    return q, k, v, beta


def _mlp_state(seed=1):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, D_K, 5, generator=gen, dtype=torch.float64) / 2,
        torch.randn(B, H, 5, D_V, generator=gen, dtype=torch.float64) / 3,
    )


CASES = {  # name: (function class, optimizer, takes beta, initial state)
    "gradient_step": (Linear(), GradientStep(), False, None),
    "online_sgd": (Linear(), OnlineSGD(), True, None),
    "implicit_step": (Linear(), ImplicitStep(), True, None),
    "mini_batch_gd": (Linear(), MiniBatchGD(mini_batch_size=3), True, None),
    "momentum": (Linear(), MomentumSGD(eta=0.5, alpha=0.1), True, None),
    "conjugate_gradient": (Linear(), ConjugateGradient(steps=2, ridge=0.1), False, None),
    "exact_solve": (Linear(), ExactSolve(ridge=0.1), False, None),
    "rls": (Linear(), RecursiveLeastSquares(ridge=0.5), False, None),
    "kernel_smoother": (LocalConstant(), ExactSolve(ridge=0.0), False, None),
    "local_linear": (LocalLinear(), ExactSolve(ridge=0.1), False, None),
    "kernel_ridge": (KernelRidge(), ExactSolve(ridge=0.1), False, None),
    "mlp_sgd": (MLP(), OnlineSGD(), True, "mlp"),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("window", [1, 4])
def test_each_token_answers_from_the_uniform_fit_of_its_window(name, window):
    """The definition, token by token: the uniform layer run on pairs t−w+1..t, answering at t."""
    function_class, optimizer, stepped, state = CASES[name]
    q, k, v, beta = _inputs()
    options = {"beta": beta} if stepped else {}
    if state == "mlp":
        options["initial_state"] = _mlp_state()
    windowed = TestTimeRegression(SlidingWindow(window), function_class, optimizer)
    uniform = TestTimeRegression(Uniform(), function_class, optimizer)
    o, _ = windowed(q, k, v, **options)
    expected = []
    for t in range(T):
        s = max(0, t - window + 1)
        part = {n: x[:, s : t + 1] if n == "beta" else x for n, x in options.items()}
        o_t, _ = uniform(q[:, s : t + 1], k[:, s : t + 1], v[:, s : t + 1], **part)
        expected.append(o_t[:, -1])
    assert relative_error(o, torch.stack(expected, 1)) < 1e-12


def test_a_window_of_linear_attention_is_banded_attention_and_keeps_the_last_w_pairs():
    q, k, v, _ = _inputs()
    w = 3
    o, S = TestTimeRegression(SlidingWindow(w), Linear(), GradientStep())(q, k, v, scale=1.0, output_final_state=True)
    band = torch.ones(T, T, dtype=torch.float64).tril() - torch.ones(T, T, dtype=torch.float64).tril(-w)
    scores = torch.einsum("bthd,bshd->bhts", q, k) * band
    assert relative_error(o, torch.einsum("bhts,bshd->bthd", scores, v)) < 1e-12
    assert relative_error(S, torch.einsum("bshk,bshv->bhkv", k[:, -w:], v[:, -w:])) < 1e-12


@pytest.mark.parametrize("name", ["online_sgd", "exact_solve", "kernel_smoother", "mlp_sgd"])
def test_a_window_as_long_as_the_sequence_is_uniform_weights(name):
    function_class, optimizer, stepped, state = CASES[name]
    q, k, v, beta = _inputs(seed=3)
    options = {"beta": beta} if stepped else {}
    if state == "mlp":
        options["initial_state"] = _mlp_state()
    o_w, _ = TestTimeRegression(SlidingWindow(T), function_class, optimizer)(q, k, v, **options)
    o_u, _ = TestTimeRegression(Uniform(), function_class, optimizer)(q, k, v, **options)
    assert torch.equal(o_w, o_u)


def test_steps_per_token_windows_whole_tokens_and_momentum_windows_its_gates():
    w = 3
    q, k, v, beta = _inputs(rows=2)
    o, _ = TestTimeRegression(SlidingWindow(w), Linear(), StepsPerToken(num_householder=2))(q, k, v, beta=beta)
    uniform = TestTimeRegression(Uniform(), Linear(), StepsPerToken(num_householder=2))
    t = T - 1  # the last token: its window's tokens t−2..t, each with its two rows
    o_t, _ = uniform(
        q[:, t - w + 1 :], k[:, 2 * (t - w + 1) :], v[:, 2 * (t - w + 1) :], beta=beta[:, 2 * (t - w + 1) :]
    )
    assert relative_error(o[:, -1], o_t[:, -1]) < 1e-12

    q, k, v, beta = _inputs()
    gen = torch.Generator().manual_seed(5)
    eta, alpha = torch.rand(B, T, H, generator=gen, dtype=torch.float64), 0.1 * torch.ones(B, T, H, dtype=torch.float64)
    o, _ = TestTimeRegression(SlidingWindow(w), Linear(), MomentumSGD())(q, k, v, beta=beta, eta=eta, alpha=alpha)
    window = slice(T - w, T)
    o_t, _ = TestTimeRegression(Uniform(), Linear(), MomentumSGD())(
        q[:, window], k[:, window], v[:, window], beta=beta[:, window], eta=eta[:, window], alpha=alpha[:, window]
    )
    assert relative_error(o[:, -1], o_t[:, -1]) < 1e-12


def test_window_errors_name_their_argument():
    q, k, v, beta = _inputs()
    layer = TestTimeRegression(SlidingWindow(3), Linear(), OnlineSGD())
    with pytest.raises(ValueError, match="^g: .*SlidingWindow"):
        layer(q, k, v, beta=beta, g=torch.zeros(B, T, H, dtype=torch.float64))
    with pytest.raises(ValueError, match="^beta: "):  # checked before the windows are cut: the caller's shapes
        layer(q, k, v, beta=beta[:, :-1])
    with pytest.raises(ValueError, match="^window: "):
        SlidingWindow(0)
    with pytest.raises(TypeError, match="^window: "):
        SlidingWindow(2.5)
