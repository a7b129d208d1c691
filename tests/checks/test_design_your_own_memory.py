"""Chapter 13's capstone checks accept a right answer at any point no named layer occupies, and reject the plausible
wrong ones: a named layer's point or a named layer renamed, a named layer with a step size and gate of its own per
token (the gated implicit step on unit keys; gated DeltaNet's op at β/(1+β)), an update that ignores the weights,
another optimiser's step, a step that forgets the key's length, a layer that looks ahead (told so first) or steps
otherwise than it forwards, a mix that keeps a parameter its point does not take, and a call of anything of the
package the chapter does not hand the student: the framework itself, its solvers (r38c's bypass: the RLS solver of
``LINEAR_SOLVERS``, one level below the framework), ``momentum_sgd``, the window runner, a named layer's op or class.

That an unattempted stub is reported is tested for every check at once in test_contract.py.
"""

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import design_your_own_memory as checks
from ttr_edu.checks._rules import to_record
from ttr_edu.layers import GatedDeltaNet, Mixer, MixerSpec, register, unregister
from ttr_edu.layers.regression import RegressionMixer
from ttr_edu.ops import delta_rule_recurrent, gated_delta_rule_chunk
from ttr_edu.regression import deep, window
from ttr_edu.regression.design_space import Point
from ttr_edu.regression.function_classes import Linear
from ttr_edu.regression.linear import LINEAR_SOLVERS
from ttr_edu.regression.optimizers import RecursiveLeastSquares

GATED_LONGHORN = Point.of("gates", "linear", "implicit_step")  # gated DeltaNet at β/(1+β) on unit keys: refused
GATED_RLS = Point.of("gates", "linear", "rls")  # the default
WINDOW_LONGHORN = Point.of("window", "linear", "implicit_step", window=4)


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


def window_implicit_step(state, q, k, v, beta, g, unit_keys=False):  # window × linear × implicit step
    _, pairs = state
    pairs = (pairs + [(k, v, beta)])[-4:]
    S = zeros(k.shape[0], v.shape[0])
    for k_i, v_i, b_i in pairs:  # each token re-runs the proximal step over its window's pairs, from zero
        eps = b_i / (1 + b_i) if unit_keys else b_i / (1 + b_i * (k_i @ k_i))
        S = S + eps * torch.outer(k_i, v_i - S.T @ k_i)
    return S.T @ q, (S, pairs)


@pytest.mark.parametrize(
    "step,initial_state,point",
    [
        (window_implicit_step, window_state, WINDOW_LONGHORN),
        (forgetting_rls, forgetting_rls_state, Point.of("gates", "linear", "rls", ridge=0.5)),
        (sliding_window_linear_attention, window_state, Point.of("window", "linear", "gradient_step", window=4)),
    ],
    ids=["sliding-window implicit step", "forgetting-factor RLS", "sliding-window linear attention"],
)
def test_a_right_update_passes_at_its_point(step, initial_state, point, capsys):
    assert checks.check_my_step(step, initial_state, point) is True
    assert "PASS" in capsys.readouterr().out


def test_the_default_initial_state_reaches_the_answer():
    # the check's own zero state is given to the answer's loop: it was once refused as "not given to this exercise",
    # which told a student who left initial_state out that they had called something forbidden
    seen = []

    def step(state, q, k, v, beta, g):
        seen.append(state)
        raise ValueError("the student's own bug")

    with pytest.raises(CheckFailed, match="the student's own bug"):
        checks.check_my_step(step)
    assert isinstance(seen[0], torch.Tensor) and not seen[0].any()


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
    return window_implicit_step(state, q, k, v, beta, g, unit_keys=True)


def rls_ignores_the_gate(state, q, k, v, beta, g):
    return forgetting_rls(state, q, k, v, beta, torch.zeros_like(g))


def rls_state(d_k, d_v):
    return zeros(d_k, d_v), torch.eye(d_k, dtype=torch.float64) / 0.1


def constant_ridge(state, q, k, v, beta, g):  # Mesa: the ridge kept at λ while the data fade
    A, M = state
    a = torch.exp(g)
    A, M = a * A + torch.outer(k, k), a * M + torch.outer(k, v)
    S = torch.linalg.solve(A + 0.1 * torch.eye(k.shape[0], dtype=torch.float64), M)
    return S.T @ q, (A, M)


def predicts_before_the_gate(state, q, k, v, beta, g):  # the error read from the undecayed state
    eps = beta / (1 + beta * (k @ k))
    S = torch.exp(g) * state + eps * torch.outer(k, v - state.T @ k)
    return S.T @ q, S


def reads_the_old_state(state, q, k, v, beta, g):  # gated RLS answering from S_{t-1}: the pair is written after
    o, new = forgetting_rls(state, q, k, v, beta, g)
    return state[0].T @ q, new


def window_one_pair_too_long(state, q, k, v, beta, g):  # the window's linear attention keeping w + 1 = 5 pairs
    S, pairs = state
    S, pairs = S + torch.outer(k, v), pairs + [(k, v)]
    if len(pairs) > 5:
        k_old, v_old = pairs[0]
        S, pairs = S - torch.outer(k_old, v_old), pairs[1:]
    return S.T @ q, (S, pairs)


def calls_the_framework(state, q, k, v, beta, g):  # keeps the prefix and asks the package for the answer
    state = state + [(q, k, v, beta, g)]
    Q, K, V, B, G = (torch.stack(x)[None, :, None] for x in zip(*state))
    o, _ = WINDOW_LONGHORN.layer()(Q, K, V, beta=B, scale=1.0)
    return o[0, -1, 0], state


@pytest.mark.parametrize(
    "step,initial_state,point,message",
    [
        (rls_ignores_the_gate, rls_state, GATED_RLS, r"RLS\): your update ignores or mistakes the weights"),
        (constant_ridge, lambda d_k, d_v: (zeros(d_k, d_k), zeros(d_k, d_v)), GATED_RLS, r"exact solve \(Mesa\)"),
        (unit_key_step, window_state, WINDOW_LONGHORN, r"ε = β/\(1\+β\), which is right only for unit keys"),
        (reads_the_old_state, forgetting_rls_state, Point.of("gates", "linear", "rls", ridge=0.5), "before its pair"),
        (
            window_one_pair_too_long,
            window_state,
            Point.of("window", "linear", "gradient_step", window=4),
            r"keeps one pair too many: .* a window of 5 pairs\. Token t's window is pairs t − 3 to t",
        ),
    ],
    ids=["ignores the gate", "constant ridge (Mesa)", "β/(1+β)", "reads the old state", "window off by one"],
)
def test_a_wrong_update_fails_and_says_what_it_computes(step, initial_state, point, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_step(step, initial_state, point)


def prefix(d_k, d_v):
    return []


def rls_by_the_solver_table(state, q, k, v, beta, g):  # r38c's bypass: the framework's RLS solver, rerun on the prefix
    state = state + [(q, k, v, g)]
    Q, K, V, G = (torch.stack(x)[None, None] for x in zip(*state))
    o, _ = LINEAR_SOLVERS[RecursiveLeastSquares](RecursiveLeastSquares(ridge=0.1), Q, K, V, G, None, None)
    return o[0, 0, -1], state


MOMENTUM = Point.of("uniform", "linear", "momentum")
MOMENTUM_SGD = MOMENTUM.objects()[2]  # built where the cell runs, as a student would, before the check


def momentum_by_the_framework(state, q, k, v, beta, g):  # the framework's momentum runner, rerun on the prefix
    state = state + [(q, k, v, beta)]
    Q, K, V, B = (torch.stack(x)[None, None] for x in zip(*state))
    S0 = torch.zeros(1, 1, k.shape[0], v.shape[0], dtype=torch.float64)
    o, _ = deep.momentum_sgd(MOMENTUM_SGD, Linear(), (S0,), Q, K, V, B, None, None)
    return o[0, 0, -1], state


@pytest.mark.parametrize(
    "step,point,refused",
    [
        (calls_the_framework, WINDOW_LONGHORN, "ttr_edu.regression.design_space.Point.layer"),
        (rls_by_the_solver_table, GATED_RLS, "ttr_edu.regression.linear._recursive_least_squares"),
        (momentum_by_the_framework, MOMENTUM, "ttr_edu.regression.deep.momentum_sgd"),
    ],
    ids=["the framework", "LINEAR_SOLVERS[RecursiveLeastSquares] (r38c)", "deep.momentum_sgd"],
)
def test_the_framework_and_its_solvers_are_not_an_answer(step, point, refused):
    """Right values (each reruns the package on the prefix), refused by the allow-list, naming what was called."""
    with pytest.raises(CheckFailed, match=f"my_step: the exercise asks you to write this yourself; {refused} is not "):
        checks.check_my_step(step, prefix, point)


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
        (GATED_LONGHORN, "computes gated DeltaNet with a step size and a gate of its own at each token"),
        (Point.of("decay", "linear", "implicit_step"), "computes gated DeltaNet with a step size and a gate"),
        (Point.of("uniform", "kernel_smoother", "online_sgd"), "makes no layer"),
    ],
)
def test_a_point_a_named_layer_occupies_is_refused(point, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_step(gated_implicit_step, zeros, point)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"window": 1000}, r"window of your point \(w\) is 1000; the check takes an integer from 1 to 64"),
        ({"window": 0}, r"window of your point \(w\) is 0; the check takes an integer from 1 to 64"),
        ({"window": 8.0}, r"window of your point \(w\) is 8.0; the check takes an integer"),
        ({"window": True}, r"window of your point \(w\) is True; the check takes an integer"),
        ({"lr": float("inf")}, r"lr of your point \(η\) is inf; the check takes a finite number from 0.0001 to 16"),
        ({"lr": float("nan")}, r"lr of your point \(η\) is nan; the check takes a finite number"),
    ],
)
def test_a_window_point_with_parameters_out_of_the_checks_ranges_is_refused_at_once(params, message):
    """The grader runs the references at the student's point, and a window of 1000 cost it 146 s and 3.2 GB (a37e):
    a parameter outside :data:`checks.PARAM_RANGES` is refused before anything runs, naming it, its range and value."""
    import time

    point = Point.of("window", "linear", "gradient_step", **params)
    started = time.monotonic()
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_step(sliding_window_linear_attention, window_state, point)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "point, param",
    [
        (Point.of("uniform", "linear", "steps_per_token", steps=2000), "steps"),
        (Point.of("gates", "linear", "conjugate_gradient", cg_steps=17), "cg_steps"),
        (Point.of("uniform", "linear", "mini_batch_gd", mini_batch_size=33), "mini_batch_size"),
        (Point.of("gates", "linear", "rls", ridge=0.0), "ridge"),
        (Point.of("decay", "linear", "rls", gamma=2.0), "gamma"),
        (Point.of("uniform", "linear", "momentum", eta=-1.0), "eta"),
    ],
)
def test_every_counted_or_real_parameter_has_a_range(point, param):
    lo, hi = checks.PARAM_RANGES[param]
    with pytest.raises(CheckFailed, match=rf"the parameter {param} of your point .* from {lo:g} to {hi:g}"):
        checks.check_my_step(forgetting_rls, forgetting_rls_state, point)


def test_the_ranges_hold_the_explorers_values_and_the_chapter_states_the_caps():
    """Every value the explorer offers is in range (a right answer there is never refused), and the chapter's text
    for 13.1 states the integer caps the check uses."""
    import json
    from pathlib import Path

    from ttr_edu.regression.design_space import PARAMS

    for name, param in PARAMS.items():
        if name in checks.PARAM_RANGES:
            lo, hi = checks.PARAM_RANGES[name]
            assert all(lo <= v <= hi for v in (*param.values, param.default)), name
    chapter = Path(__file__).resolve().parents[2] / "solutions" / "13_design_your_own_memory.ipynb"
    cells = json.loads(chapter.read_text())["cells"]
    text = " ".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")
    for name in ("window", "steps", "cg_steps", "mini_batch_size"):
        assert f"`{name}` up to {checks.PARAM_RANGES[name][1]:g}" in text, name


# -- part 2: the mixer -------------------------------------------------------------------------------------------------


class MyMemory(Mixer):  # a right answer at the default point (gated RLS), as the solutions notebook writes it
    def __init__(self, hidden_size, num_heads=1, *, use_short_conv=True, conv_size=4, feature_map="silu"):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.g_proj = nn.Linear(hidden_size, num_heads)
        nn.init.constant_(self.g_proj.bias, 3.0)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        q, k = self._normed_qk(qkv)
        v = self._heads(qkv[..., 2 * self.hidden_size :])
        return {"q": q, "k": k, "v": v, "g": F.logsigmoid(self.g_proj(x))}

    def update(self, S, P, q, k, v, g):  # one token of every sequence and head: S (B, H, D, D), P (B, H, D, D)
        P = P / torch.exp(g)[..., None, None]
        Pk = torch.einsum("bhij,bhj->bhi", P, k)
        P = P - Pk[..., :, None] * Pk[..., None, :] / (1 + (k * Pk).sum(-1))[..., None, None]
        error = v - torch.einsum("bhkv,bhk->bhv", S, k)
        S = S + torch.einsum("bhij,bhj->bhi", P, k)[..., :, None] * error[..., None, :]
        return torch.einsum("bhkv,bhk->bhv", S, q), S, P

    def mix(self, q, k, v, g):
        memory, outputs = None, []
        for t in range(q.shape[1]):
            o, memory = self.mix_step(memory, q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1], g[:, t : t + 1])
            outputs.append(o)
        return torch.cat(outputs, 1)

    def mix_step(self, memory, q, k, v, g):
        if memory is None:
            B, _, H, D = q.shape
            eye = torch.eye(D, dtype=q.dtype) / 0.1
            memory = (q.new_zeros(B, H, D, v.shape[-1]), eye.expand(B, H, D, D))
        o, S, P = self.update(*memory, q[:, 0], k[:, 0], v[:, 0], g[:, 0])
        return self.o_norm(o[:, None]), (S, P)


class RenamedGatedDeltaNet(GatedDeltaNet):  # a named layer under a new name
    pass


class ReparametrisedGatedDeltaNet(MyMemory):  # gated DeltaNet's op with the step β/(1+β), β = 0.5 (reviewer's w1f)
    def mix(self, q, k, v, g):
        beta = torch.full_like(g, 0.5)
        return self.o_norm(gated_delta_rule_chunk(q, k, v, g, beta / (1 + beta), scale=1.0)[0])


class HandWrittenGatedDeltaNet(MyMemory):  # the same layer written out: gated DeltaNet's rule at β/(1+β), β = 0.5
    def mix(self, q, k, v, g):
        S, outputs = q.new_zeros(*q.shape[:1], q.shape[2], q.shape[3], v.shape[3]), []
        for t in range(q.shape[1]):
            S = torch.exp(g[:, t])[..., None, None] * S
            error = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])
            S = S + (0.5 / 1.5) * k[:, t, ..., :, None] * error[..., None, :]
            outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
        return self.o_norm(torch.stack(outputs, 1))


class SolverTable(MyMemory):  # r38c's bypass: the framework's RLS solver, one level below TestTimeRegression
    def mix(self, q, k, v, g):
        solve = LINEAR_SOLVERS[RecursiveLeastSquares]
        o, _ = solve(RecursiveLeastSquares(ridge=0.1), *(x.transpose(1, 2) for x in (q, k, v, g)), None, None)
        return self.o_norm(o.transpose(1, 2))

    def mix_step(self, memory, q, k, v, g):  # reruns the prefix through the same solver
        prefix = (q, k, v, g) if memory is None else tuple(torch.cat(x, 1) for x in zip(memory, (q, k, v, g)))
        return self.mix(*prefix)[:, -1:], prefix


class IgnoresTheGate(MyMemory):
    def update(self, S, P, q, k, v, g):
        return super().update(S, P, q, k, v, torch.zeros_like(g))


class ReadsTheOldState(MyMemory):  # answers from S_{t-1}: the pair is written after the read
    def update(self, S, P, q, k, v, g):
        _, S_new, P_new = super().update(S, P, q, k, v, g)
        return torch.einsum("bhkv,bhk->bhv", S, q), S_new, P_new


class LooksAhead(MyMemory):  # its gate reads the whole sequence
    def op_inputs(self, x, qkv):
        inputs = super().op_inputs(x, qkv)
        inputs["g"] = F.logsigmoid(self.g_proj(x.mean(1, keepdim=True).expand_as(x)))
        return inputs


class MixesTheFuture(MyMemory):  # mix adds a little of the reversed sequence
    def mix(self, q, k, v, g):
        out = super().mix(q, k, v, g)
        return out + 1e-3 * out.flip(1)


class NeedsBeta(MyMemory):  # uses a β its point (gated RLS) does not take
    def mix(self, q, k, v, beta, g):
        return super().mix(q, k, v, g) * (1 + beta.mean())


class CallsTheFramework(MyMemory):
    def mix(self, q, k, v, g):
        return self.o_norm(GATED_RLS.layer()(q, k, v, g=g)[0])


class StepNotWritten(MyMemory):  # mix is written (its own loop), mix_step is the stub
    def mix(self, q, k, v, g):
        B, T, H, D = q.shape
        S, P = q.new_zeros(B, H, D, v.shape[-1]), (torch.eye(D, dtype=q.dtype) / 0.1).expand(B, H, D, D)
        outputs = []
        for t in range(T):
            o, S, P = self.update(S, P, q[:, t], k[:, t], v[:, t], g[:, t])
            outputs.append(o)
        return self.o_norm(torch.stack(outputs, 1))

    def mix_step(self, memory, q, k, v, g):
        raise NotImplementedError()


class StepForgetsTheGate(StepNotWritten):
    def mix_step(self, memory, q, k, v, g):
        return MyMemory.mix_step(self, memory, q, k, v, torch.zeros_like(g))


class KeepsTheStubsBeta(StepNotWritten):  # mix(q, k, v, beta, g) as the old stub, β returned and unused: it passes
    def __init__(self, hidden_size, num_heads=1, **kwargs):
        super().__init__(hidden_size, num_heads, **kwargs)
        self.b_proj = nn.Linear(hidden_size, num_heads)

    def op_inputs(self, x, qkv):
        return {**super().op_inputs(x, qkv), "beta": torch.sigmoid(self.b_proj(x))}

    def mix(self, q, k, v, beta, g):
        return StepNotWritten.mix(self, q, k, v, g)

    def mix_step(self, memory, q, k, v, beta, g):
        return MyMemory.mix_step(self, memory, q, k, v, g)


class UsesTheStubsBeta(KeepsTheStubsBeta):  # as above, but mix uses β, which its point (gated RLS) does not take
    def mix(self, q, k, v, beta, g):
        return StepNotWritten.mix(self, q, k, v, g) * (1 + 0 * beta.mean())


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


@pytest.mark.parametrize("cls", [MyMemory, KeepsTheStubsBeta])
def test_a_right_mixer_passes(registered, capsys, cls):
    assert checks.check_my_mixer(registered(cls), GATED_RLS) is True
    assert f"PASS my_mixer: {cls.__name__.lower()} is" in capsys.readouterr().out


@pytest.mark.parametrize(
    "cls,message",
    [
        (RenamedGatedDeltaNet, "ttr_edu.layers.linear.GatedDeltaNet.op_inputs is not given to this exercise"),
        (UsesTheStubsBeta, "it takes no beta: give mix and mix_step exactly those parameters"),
        (ReparametrisedGatedDeltaNet, "ops.gated_delta_rule.gated_delta_rule_chunk is not given to this exercise"),
        (HandWrittenGatedDeltaNet, "your mix computes gated DeltaNet with a step size and a gate of its own"),
        (IgnoresTheGate, "RLS\\): your layer ignores or mistakes the weights"),
        (ReadsTheOldState, r"your layer answers token t from the memory before its pair is written"),
        (LooksAhead, "(?s)my_mixer \\(causal\\).*\\n  your layer looks ahead: its output at t depends on tokens"),
        (MixesTheFuture, "(?s)my_mixer \\(causal\\).*\\n  your layer looks ahead"),
        (StepForgetsTheGate, "mix_step must take the same step as mix"),
        (NeedsBeta, "(?s)forward raised TypeError.*must take exactly the names op_inputs returns.* takes q, k, v, g"),
        (CallsTheFramework, "ttr_edu.regression.design_space.Point.layer is not given to this exercise"),
        (SolverTable, r"my_mixer \(causal\): .*linear._recursive_least_squares is not given to this exercise$"),
    ],
)
def test_a_wrong_mixer_fails_and_says_why(registered, cls, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_my_mixer(registered(cls), GATED_RLS)


def test_the_default_point_of_the_first_version_is_refused_with_gated_deltanets_op(registered):
    """The reviewer's renamed layer: gated DeltaNet's op at β/(1+β) at the gated implicit step, which on unit keys is
    that op; the point itself is refused, naming the layer."""
    with pytest.raises(CheckFailed, match="computes gated DeltaNet with a step size and a gate of its own at each"):
        checks.check_my_mixer(registered(ReparametrisedGatedDeltaNet), GATED_LONGHORN)


def test_a_spec_that_claims_a_named_layer_or_is_not_registered_is_refused(registered):
    with pytest.raises(CheckFailed, match="says it is the named layer 'gated_deltanet'"):
        checks.check_my_mixer(registered(MyMemory, named_layer="gated_deltanet"), GATED_RLS)
    with pytest.raises(CheckFailed, match="register your spec first"):
        checks.check_my_mixer(MixerSpec("never_registered", "never registered", MyMemory), GATED_RLS)


class RawGate(MyMemory):  # the gate's projection used as g itself: exp(g) > 1 grows the memory without bound
    def __init__(self, hidden_size, num_heads=1, **kwargs):
        super().__init__(hidden_size, num_heads, **kwargs)
        nn.init.constant_(self.g_proj.bias, 3.0)  # as the notebook's constructor starts the gates: nearly open

    def op_inputs(self, x, qkv):
        return {**super().op_inputs(x, qkv), "g": self.g_proj(x)}


class RawStepSize(MyMemory):  # β without the sigmoid: negative and above 1
    def __init__(self, hidden_size, num_heads=1, **kwargs):
        super().__init__(hidden_size, num_heads, **kwargs)
        self.b_proj = nn.Linear(hidden_size, num_heads)

    def op_inputs(self, x, qkv):
        return {**super().op_inputs(x, qkv), "beta": self.b_proj(x)}


@pytest.mark.parametrize(
    "cls,message",
    [
        (RawGate, r"op_inputs gave g from .* the exercise asks for g ≤ 0 \(pass the projection through .*logsigmoid"),
        (RawStepSize, r"op_inputs gave beta from .* the exercise asks for beta in \(0, 1\) \(pass .* torch.sigmoid"),
    ],
)
def test_op_inputs_out_of_their_ranges_fail(registered, cls, message):
    point = GATED_RLS if cls is RawGate else Point.of("gates", "linear", "online_sgd")  # a point that takes β
    with pytest.raises(CheckFailed, match=message):
        record = to_record(checks._collect_mixer((registered(cls), point), nullcontext))  # what the grader reads
        checks._check_op_inputs(record, point)


def test_a_mixer_whose_step_is_the_stub_is_not_attempted(registered, capsys, monkeypatch):
    spec = registered(StepNotWritten)  # mix is right: the check used to go on and print PASS
    assert checks.check_my_mixer(spec, GATED_RLS) is False
    assert "not attempted yet" in capsys.readouterr().out
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(CheckFailed, match="not attempted"):
        checks.check_my_mixer(spec, GATED_RLS)


# -- window points: the step must drop the pair that leaves the window (the reviewer's W5c) ---------------------------

WINDOW_LA = Point.of("window", "linear", "gradient_step")  # the default window, w = 32: the chapter's suggestion


class WindowLinearAttention(Mixer):  # a right answer at window · linear · one gradient step
    takes_window = True

    def __init__(self, hidden_size, num_heads=1, *, use_short_conv=True, conv_size=4, feature_map="silu"):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.o_norm = nn.RMSNorm(self.head_dim)
        self.w, self.lr = WINDOW_LA.param("window"), WINDOW_LA.param("lr")

    def op_inputs(self, x, qkv):
        q, k = self._normed_qk(qkv)
        return {"q": q, "k": k, "v": self._heads(qkv[..., 2 * self.hidden_size :])}

    def mix(self, q, k, v):
        kv = self.lr * torch.einsum("bthk,bthv->bthkv", k, v).cumsum(1)
        if self.takes_window:  # the sum over the last w pairs: the running sum less its value w tokens ago
            kv = kv - torch.cat([torch.zeros_like(kv[:, : self.w]), kv[:, : -self.w]], 1)
        return self.o_norm(torch.einsum("bthkv,bthk->bthv", kv, q))

    def mix_step(self, memory, q, k, v):
        kv = self.lr * k[:, 0, :, :, None] * v[:, 0, :, None, :]
        S, pairs = (torch.zeros_like(kv), []) if memory is None else memory
        S, pairs = S + kv, [*pairs, kv]
        if len(pairs) > self.w:
            S, pairs = S - pairs[0], pairs[1:]
        return self.o_norm(torch.einsum("bhkv,bhk->bhv", S, q[:, 0])[:, None]), (S, pairs)


class WindowStepKeepsEveryPair(WindowLinearAttention):  # mix right, mix_step never drops a pair: W5c
    def mix_step(self, memory, q, k, v):
        kv = self.lr * k[:, 0, :, :, None] * v[:, 0, :, None, :]
        S = kv if memory is None else memory + kv
        return self.o_norm(torch.einsum("bhkv,bhk->bhv", S, q[:, 0])[:, None]), S


class IgnoresTheWindow(WindowLinearAttention):  # linear attention: mix and mix_step agree, the window is gone
    takes_window = False

    def mix_step(self, memory, q, k, v):
        return WindowStepKeepsEveryPair.mix_step(self, memory, q, k, v)


def test_a_window_mixer_passes(registered, capsys):
    assert checks.check_my_mixer(registered(WindowLinearAttention), WINDOW_LA) is True


def test_a_window_step_that_never_drops_a_pair_fails(registered):
    """Its forward is right and its step agrees with it until the window fills: the step is tested past 2w tokens."""
    with pytest.raises(
        CheckFailed,
        match=r"(?s)my_mixer \(step == forward\).*\n  your layer.s step\(\).*mix_step must take the same step",
    ):
        checks.check_my_mixer(registered(WindowStepKeepsEveryPair), WINDOW_LA)


WINDOW_EXACT = Point.of("window", "linear", "exact_solve")  # r38c's own point
UNIFORM_EXACT = WINDOW_EXACT.replace("weights", "uniform").layer()  # built where the cell runs, before the check


class WindowRunner(WindowLinearAttention):  # the framework's window runner over its uniform exact solve
    def mix(self, q, k, v):
        return self.o_norm(window.windowed(UNIFORM_EXACT, WINDOW_EXACT.param("window"), q, k, v)[0])

    def mix_step(self, memory, q, k, v):  # reruns the prefix through the same runner
        prefix = (q, k, v) if memory is None else tuple(torch.cat(x, 1) for x in zip(memory, (q, k, v)))
        return self.mix(*prefix)[:, -1:], prefix


def test_the_window_runner_is_not_an_answer(registered):
    with pytest.raises(CheckFailed, match=r"; ttr_edu.regression.window.windowed is not given to this exercise$"):
        checks.check_my_mixer(registered(WindowRunner), WINDOW_EXACT)


def test_a_mixer_that_ignores_the_window_is_told_it_is_linear_attention(registered):
    with pytest.raises(CheckFailed, match=r"\(linear attention\): your layer ignores the window") as failure:
        checks.check_my_mixer(registered(IgnoresTheWindow), WINDOW_LA)
    assert "step size and a gate of its own" not in str(failure.value)


class RenamedDeltaNetOp(Mixer):  # DeltaNet's own op at the momentum point, under a new name (the reviewer's W1)
    def __init__(self, hidden_size, num_heads=1, *, use_short_conv=True, conv_size=4, feature_map="silu"):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.b_proj = nn.Linear(hidden_size, num_heads)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        q, k = self._normed_qk(qkv)
        v = self._heads(qkv[..., 2 * self.hidden_size :])
        return {"q": q, "k": k, "v": v, "beta": torch.sigmoid(self.b_proj(x))}

    def mix(self, q, k, v, beta):
        return self.o_norm(delta_rule_recurrent(q, k, v, beta)[0])

    def mix_step(self, memory, q, k, v, beta):
        o, S = delta_rule_recurrent(q, k, v, beta, initial_state=memory, output_final_state=True)
        return self.o_norm(o), S


class HandWrittenDeltaNet(RenamedDeltaNetOp):  # DeltaNet's rule written out at the momentum point
    def mix(self, q, k, v, beta):
        memory, outputs = None, []
        for t in range(q.shape[1]):
            o, memory = self.mix_step(memory, q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1], beta[:, t : t + 1])
            outputs.append(o)
        return torch.cat(outputs, 1)

    def mix_step(self, memory, q, k, v, beta):
        q, k, v, beta = q[:, 0], k[:, 0], v[:, 0], beta[:, 0]
        S = q.new_zeros(*k.shape, v.shape[-1]) if memory is None else memory
        error = v - torch.einsum("bhkv,bhk->bhv", S, k)
        S = S + beta[..., None, None] * k[..., :, None] * error[..., None, :]
        return self.o_norm(torch.einsum("bhkv,bhk->bhv", S, q * q.shape[-1] ** -0.5)[:, None]), S


class CallsTheFrameworkAtMomentum(RegressionMixer):  # the framework's own mixer under a new name (the reviewer's W8)
    def __init__(self, hidden_size, num_heads=1, **kwargs):
        super().__init__(hidden_size, num_heads, point=MOMENTUM, **kwargs)


def test_a_named_layers_op_is_refused_and_its_rule_is_named_as_itself_not_as_a_family(registered):
    """DeltaNet's op under a new name is refused as a call the exercise does not give; DeltaNet's rule written out is
    named as DeltaNet (a neighbour of the momentum point), not as the first-order family that holds it."""
    with pytest.raises(CheckFailed, match=r"ttr_edu.ops.delta_rule.delta_rule_recurrent is not given to this exerc"):
        checks.check_my_mixer(registered(RenamedDeltaNetOp), MOMENTUM)
    with pytest.raises(CheckFailed, match=r"your mix computes uniform · linear · online SGD \(DeltaNet\)") as failure:
        checks.check_my_mixer(registered(HandWrittenDeltaNet), MOMENTUM)
    assert "β/(1+β)" not in str(failure.value)


def test_the_framework_renamed_gets_no_second_diagnosis(registered):
    """The mix is the point's own output: no neighbour (a window longer than the sequence) is named beside it."""
    with pytest.raises(CheckFailed, match="RegressionMixer.op_inputs is not given to this exercise") as failure:
        checks.check_my_mixer(registered(CallsTheFrameworkAtMomentum), MOMENTUM)
    assert "your mix computes" not in str(failure.value)
    assert "looks ahead" not in str(failure.value)  # the call is refused, not taken for a look ahead


# -- the explorer and the check agree on every point (one rule: design_space.identify) -------------------------------


def _linear_points():
    import itertools

    from ttr_edu.regression.design_space import AXES, CHOICES

    points = [Point.of(*keys) for keys in itertools.product(*(CHOICES[axis] for axis in AXES))]
    points.append(Point.of("uniform", "linear", "momentum", eta=0.0))  # DeltaNet with a weight decay
    return [p for p in points if p.function_class == "linear" and p.problem() is None]


def test_the_check_refuses_exactly_the_points_the_explorer_calls_occupied():
    """At every linear point of the catalogue (the explorer's defaults, and momentum at η = 0): the check refuses it
    if and only if identify says a named layer occupies it, and the explorer's sentence says which (r38b F6: at
    uniform · linear · CG the explorer said "No named layer sits here" and the check refused it as MesaNet (CG))."""
    from ttr_edu.regression.design_space import identify

    disagree = []
    for point in _linear_points():
        identity = identify(point)
        try:
            checks._refuse_occupied(point)
            refused = None
        except CheckFailed as failure:
            refused = str(failure)
        sentence = identity.sentence()
        says_occupied = sentence.startswith(("This is ", "Occupied"))
        if (refused is not None) != (identity.occupied is not None) or says_occupied != (refused is not None):
            disagree.append(f"{point.describe()}: check {refused!r}, explorer {sentence!r}")
    assert not disagree, "\n".join(disagree)
    assert any(identify(p).up_to_steps and not identify(p).same_as for p in _linear_points())  # not vacuous
