"""Chapter 13's capstone checks accept a right answer at any point no named layer occupies, and reject the plausible
wrong ones: a named layer's point, an update that ignores the weights, another optimiser's step, a step that forgets
the key's length, and a call of the framework itself.

That an unattempted stub is reported is tested for every check at once in test_contract.py.
"""

import pytest
import torch

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import design_your_own_memory as checks
from ttr_edu.regression.design_space import Point

GATED_LONGHORN = Point.of("gates", "linear", "implicit_step")


def zeros(d_k, d_v):
    return torch.zeros(d_k, d_v, dtype=torch.float64)


# Right answers, written the way a student would (as in the solutions notebook).
def gated_implicit_step(state, q, k, v, beta, g):
    S = torch.exp(g) * state  # the gate shrinks the past first
    eps = beta / (1 + beta * (k @ k))  # the proximal step's size
    S = S + eps * torch.outer(k, v - S.T @ k)
    return S.T @ q, S


def forgetting_rls_state(d_k, d_v):
    return zeros(d_k, d_v), torch.eye(d_k, dtype=torch.float64) / 0.5


def forgetting_rls(state, q, k, v, beta, g):  # gates × linear × RLS: the ridge fades with the data
    S, P = state
    P = P / torch.exp(g)
    u = P @ k
    P = P - torch.outer(u, u) / (1 + k @ u)
    S = S + torch.outer(P @ k, v - S.T @ k)
    return S.T @ q, (S, P)


def window_state(d_k, d_v):
    return zeros(d_k, d_v), []


def sliding_window_linear_attention(state, q, k, v, beta, g):  # window × linear × one gradient step
    S, pairs = state
    S, pairs = S + torch.outer(k, v), pairs + [(k, v)]
    if len(pairs) > 4:
        k_old, v_old = pairs[0]
        S, pairs = S - torch.outer(k_old, v_old), pairs[1:]
    return S.T @ q, (S, pairs)


@pytest.mark.parametrize(
    "step,initial_state,point",
    [
        (gated_implicit_step, zeros, GATED_LONGHORN),
        (forgetting_rls, forgetting_rls_state, Point.of("gates", "linear", "rls", ridge=0.5)),
        (sliding_window_linear_attention, window_state, Point.of("window", "linear", "gradient_step", window=4)),
    ],
    ids=["gated implicit step", "forgetting-factor RLS", "sliding-window linear attention"],
)
def test_a_right_update_passes_at_its_point(step, initial_state, point, capsys):
    assert checks.check_my_step(step, initial_state, point) is True
    assert "PASS" in capsys.readouterr().out


# Plausible wrong answers.
def ignores_the_gate(state, q, k, v, beta, g):
    S = state
    eps = beta / (1 + beta * (k @ k))
    S = S + eps * torch.outer(k, v - S.T @ k)
    return S.T @ q, S


def explicit_step(state, q, k, v, beta, g):
    S = torch.exp(g) * state
    S = S + beta * torch.outer(k, v - S.T @ k)
    return S.T @ q, S


def unit_key_step(state, q, k, v, beta, g):  # right only when ‖k‖ = 1: the check's keys have other lengths
    S = torch.exp(g) * state
    S = S + beta / (1 + beta) * torch.outer(k, v - S.T @ k)
    return S.T @ q, S


def predicts_before_the_gate(state, q, k, v, beta, g):  # the error read from the undecayed state
    eps = beta / (1 + beta * (k @ k))
    S = torch.exp(g) * state + eps * torch.outer(k, v - state.T @ k)
    return S.T @ q, S


def calls_the_framework(state, q, k, v, beta, g):  # keeps the prefix and asks the package for the answer
    state = state + [(q, k, v, beta, g)]
    Q, K, V, B, G = (torch.stack(x)[None, :, None] for x in zip(*state))
    o, _ = GATED_LONGHORN.layer()(Q, K, V, beta=B, g=G, scale=1.0)
    return o[0, -1, 0], state


@pytest.mark.parametrize(
    "step,message",
    [
        (ignores_the_gate, "ignores or mistakes the weights"),
        (explicit_step, "another optimiser's step"),
        (unit_key_step, "wrong values"),
        (predicts_before_the_gate, "wrong values"),
    ],
)
def test_a_wrong_update_fails_and_says_what_it_computes(step, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_step(step, zeros, GATED_LONGHORN)


def test_the_framework_itself_is_not_an_answer():
    with pytest.raises(CheckFailed, match="package's own implementation"):
        checks.check_my_step(calls_the_framework, lambda d_k, d_v: [], GATED_LONGHORN)


@pytest.mark.parametrize(
    "point,message",
    [
        (Point.of("gates", "linear", "online_sgd"), "it is gated DeltaNet"),  # a named layer renamed
        (Point.of("decay", "linear", "online_sgd"), "constant gate"),  # a named layer with a constant gate
        (Point.of("uniform", "linear", "steps_per_token"), "it is DeltaProduct"),
        (Point.of("uniform", "linear", "momentum", eta=0.0, alpha=0.0), "With η = α = 0 it is DeltaNet"),
        (Point.of("uniform", "kernel_smoother", "exact_solve"), "takes a linear memory"),
        (Point.of("uniform", "kernel_smoother", "online_sgd"), "makes no layer"),
    ],
)
def test_a_point_a_named_layer_occupies_is_refused(point, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_step(gated_implicit_step, zeros, point)
