"""Chapter 13's capstone checks accept a right answer at any point no named layer occupies, and reject the plausible
wrong ones: a named layer's point or a named layer renamed, an update that ignores the weights, another optimiser's
step, a step that forgets the key's length, a layer that looks ahead or steps otherwise than it forwards, and a call of
the framework itself.

That an unattempted stub is reported is tested for every check at once in test_contract.py.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import design_your_own_memory as checks
from ttr_edu.layers import GatedDeltaNet, Mixer, MixerSpec, register, unregister
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
        (
            Point.of("decay", "linear", "online_sgd"),
            r"point \(it is gated DeltaNet with the constant gate g = log γ\); pick",
        ),  # a named layer with a constant gate
        (Point.of("uniform", "linear", "steps_per_token"), "it is DeltaProduct"),
        (Point.of("uniform", "linear", "momentum", eta=0.0, alpha=0.0), r"\(with η = α = 0 it is DeltaNet\)"),
        (Point.of("uniform", "kernel_smoother", "exact_solve"), "takes a linear memory"),
        (Point.of("uniform", "kernel_smoother", "online_sgd"), "makes no layer"),
    ],
)
def test_a_point_a_named_layer_occupies_is_refused(point, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_step(gated_implicit_step, zeros, point)


# -- part 2: the mixer -------------------------------------------------------------------------------------------------


class MyMemory(Mixer):  # a right answer at the default point, as the solutions notebook writes it
    def __init__(self, hidden_size, num_heads=1, *, use_short_conv=True, conv_size=4, feature_map="silu"):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.b_proj = nn.Linear(hidden_size, num_heads)
        self.g_proj = nn.Linear(hidden_size, num_heads)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        q, k = self._normed_qk(qkv)
        v = self._heads(qkv[..., 2 * self.hidden_size :])
        return {"q": q, "k": k, "v": v, "beta": torch.sigmoid(self.b_proj(x)), "g": F.logsigmoid(self.g_proj(x))}

    def update(self, S, q, k, v, beta, g):  # one token of every sequence and head: S (B, H, D, D)
        S = torch.exp(g)[..., None, None] * S
        eps = beta / (1 + beta * (k * k).sum(-1))
        error = v - torch.einsum("bhkv,bhk->bhv", S, k)
        S = S + eps[..., None, None] * k[..., :, None] * error[..., None, :]
        return torch.einsum("bhkv,bhk->bhv", S, q), S

    def mix(self, q, k, v, beta, g):
        S, outputs = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3]), []
        for t in range(q.shape[1]):
            o, S = self.update(S, q[:, t], k[:, t], v[:, t], beta[:, t], g[:, t])
            outputs.append(o)
        return self.o_norm(torch.stack(outputs, 1))

    def mix_step(self, memory, q, k, v, beta, g):
        S = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3]) if memory is None else memory
        o, S = self.update(S, q[:, 0], k[:, 0], v[:, 0], beta[:, 0], g[:, 0])
        return self.o_norm(o[:, None]), S


class RenamedGatedDeltaNet(GatedDeltaNet):  # a named layer under a new name
    pass


class IgnoresTheGate(MyMemory):
    def update(self, S, q, k, v, beta, g):
        return super().update(S, q, k, v, beta, torch.zeros_like(g))


class LooksAhead(MyMemory):  # its step size reads the whole sequence
    def op_inputs(self, x, qkv):
        inputs = super().op_inputs(x, qkv)
        inputs["beta"] = torch.sigmoid(self.b_proj(x.mean(1, keepdim=True).expand_as(x)))
        return inputs


class StepForgetsTheGate(MyMemory):
    def mix_step(self, memory, q, k, v, beta, g):
        return super().mix_step(memory, q, k, v, beta, torch.zeros_like(g))


class ExplicitStep(MyMemory):
    def update(self, S, q, k, v, beta, g):
        S = torch.exp(g)[..., None, None] * S
        S = S + beta[..., None, None] * k[..., :, None] * (v - torch.einsum("bhkv,bhk->bhv", S, k))[..., None, :]
        return torch.einsum("bhkv,bhk->bhv", S, q), S


class CallsTheFramework(MyMemory):
    def mix(self, q, k, v, beta, g):
        return self.o_norm(GATED_LONGHORN.layer()(q, k, v, beta=beta, g=g)[0])


@pytest.fixture
def registered():
    specs = []

    def spec_of(cls, **fields):
        spec = register(MixerSpec(cls.__name__.lower(), cls.__name__, cls, **fields), replace=True)
        specs.append(spec)
        return spec

    yield spec_of
    for spec in specs:
        unregister(spec.name)


def test_a_right_mixer_passes(registered, capsys):
    assert checks.check_my_mixer(registered(MyMemory), GATED_LONGHORN) is True
    assert "PASS my_mixer: mymemory is" in capsys.readouterr().out


@pytest.mark.parametrize(
    "cls,message",
    [
        (RenamedGatedDeltaNet, "your mix computes data-dependent gates · linear · online SGD \\(gated DeltaNet\\)"),
        (IgnoresTheGate, "ignores or mistakes the weights"),
        (LooksAhead, "step\\(\\) gives other outputs than its forward|looks ahead"),
        (StepForgetsTheGate, "mix_step must take the same step as mix"),
        (ExplicitStep, "another optimiser's step"),
        (CallsTheFramework, "package's own implementation"),
    ],
)
def test_a_wrong_mixer_fails_and_says_why(registered, cls, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_mixer(registered(cls), GATED_LONGHORN)


def test_a_spec_that_claims_a_named_layer_or_is_not_registered_is_refused(registered):
    with pytest.raises(CheckFailed, match="says it is the named layer 'gated_deltanet'"):
        checks.check_my_mixer(registered(MyMemory, named_layer="gated_deltanet"), GATED_LONGHORN)
    with pytest.raises(CheckFailed, match="register your spec first"):
        checks.check_my_mixer(MixerSpec("never_registered", "never registered", MyMemory), GATED_LONGHORN)


class RawGate(MyMemory):  # the gate's projection used as g itself: exp(g) > 1 grows the memory without bound
    def __init__(self, hidden_size, num_heads=1, **kwargs):
        super().__init__(hidden_size, num_heads, **kwargs)
        nn.init.constant_(self.g_proj.bias, 3.0)  # as the notebook's constructor starts the gates: nearly open

    def op_inputs(self, x, qkv):
        return {**super().op_inputs(x, qkv), "g": self.g_proj(x)}


class RawStepSize(MyMemory):  # β without the sigmoid: negative and above 1
    def op_inputs(self, x, qkv):
        return {**super().op_inputs(x, qkv), "beta": self.b_proj(x)}


class StepNotWritten(MyMemory):
    def mix_step(self, memory, q, k, v, beta, g):
        raise NotImplementedError()


@pytest.mark.parametrize(
    "cls,message",
    [
        (RawGate, r"op_inputs gave g from .* the exercise asks for g ≤ 0 \(pass the projection through .*logsigmoid"),
        (RawStepSize, r"op_inputs gave beta from .* the exercise asks for beta in \(0, 1\) \(pass .* torch.sigmoid"),
    ],
)
def test_op_inputs_out_of_their_ranges_fail(registered, cls, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_mixer(registered(cls), GATED_LONGHORN)


def test_a_mixer_whose_step_is_the_stub_is_not_attempted(registered, capsys, monkeypatch):
    spec = registered(StepNotWritten)  # mix is right: the check used to go on and print PASS
    assert checks.check_my_mixer(spec, GATED_LONGHORN) is False
    assert "not attempted yet" in capsys.readouterr().out
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(CheckFailed, match="not attempted"):
        checks.check_my_mixer(spec, GATED_LONGHORN)
