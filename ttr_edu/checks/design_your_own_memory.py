"""Checks for chapter 13, design your own memory: the capstone, a point of the design space no named layer occupies.

* ``check_my_step(my_step, initial_state, point)``: the learner's recurrent update of one head, token by token,
  against the regression framework at the learner's own point (:class:`ttr_edu.regression.design_space.Point`): the
  objective the update must come from. A point a named layer occupies (or computes on every input: a constant
  gate, one step per token) is refused; a wrong update is reported with the point it computes instead, when it is
  one (an update that ignores the weights computes the same point with uniform weights);
* ``check_my_mixer(spec, point)``: the learner's token mixer (one class, one registered spec): its ``mix`` is the
  framework's output at the point, its ``step`` equals its ``forward``, it is causal, and it computes no named layer.

One head, one token: ``q, k`` are ``(D_k,)``, ``v`` ``(D_v,)``; ``beta`` and ``g`` are 0-dimensional tensors, ``g`` the
log of the factor by which the point's weights shrink the past at this token (``log α_t`` for gates, ``log γ`` for an
exponential decay, 0 otherwise; a window's weights are not a factor: the step keeps what it needs). Every tensor is
float64; keys are not unit vectors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ttr_edu.checks._core import CheckFailed, _is_untouched_stub, not_attempted, relative_error, under_autograder
from ttr_edu.checks._rules import run_check
from ttr_edu.regression import NAMED_LAYERS, TestTimeRegression
from ttr_edu.regression.design_space import AXES, CHOICES, LAYER_LABELS, Point, identify, named_point

__all__ = ["check_my_step", "check_my_mixer", "point_outputs", "STEPPED", "SUGGESTED"]

#: the optimisers that take the per-token step size ``beta``
STEPPED = ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum")


def _refuse_occupied(point, name: str = "my_step") -> None:
    """The capstone's rules about the point itself, before any answer is run."""
    if not isinstance(point, Point):
        raise CheckFailed(
            f"{name}: expected your point as a design_space.Point (Point.of(...)), got {type(point).__name__}"
        )
    problem = point.problem()
    if problem is not None:
        raise CheckFailed(f"{name}: your point {point.describe()} makes no layer: {problem}")
    if point.function_class != "linear":
        raise CheckFailed(
            f"{name}: the capstone takes a linear memory (a state S of D_k × D_v and what your rule carries "
            f"with it); your point has the class {point.choice('function_class').label!r}"
        )
    identity = identify(point)
    if identity.same_as is not None:
        equals = "; ".join(e[0].lower() + e[1:].rstrip(".") for e in identity.equals)  # sentences, inside brackets
        how = f"it is {LAYER_LABELS[identity.same_as]}" if identity.name else equals
        raise CheckFailed(
            f"{name}: {point.describe()} is a named layer's point ({how}); pick one that no named layer occupies"
        )
    if identity.up_to_steps is not None:  # the catalogue's rule: the explorer says the same (identify)
        _refuse_family(point, name, LAYER_LABELS[identity.up_to_steps])
    if point.optimizer == "steps_per_token":
        return  # several pairs per token: the op's inputs are not one pair per token (its step is checked as is)
    case = _probe_case(point)
    family = _named_up_to_steps(case, _framework_mix(point, None, **case))
    if family is not None:  # a safety net under identify's rule: the test over every point keeps them in step
        _refuse_family(point, name, family)


def _refuse_family(point: Point, name: str, family: str) -> None:
    why = {
        "implicit_step": " (the implicit step is online SGD at ε = β/(1+β) when ‖k‖ = 1)",
        "momentum": " (momentum with η = 0 is online SGD with a weight decay: a gate of 1 − α)",
    }
    raise CheckFailed(
        f"{name}: on unit keys, as a mixer's keys are, {point.describe()} computes {family} with a step size and a "
        f"gate of its own at each token: a named layer up to a change of β and g{why.get(point.optimizer, '')}. "
        f"Pick a point that is new even on unit keys, such as {SUGGESTED.describe()} (section 6's table)"
    )


def _length(point: Point, short: int) -> int:
    """How many tokens a test sequence has at ``point``: ``short``, and at a window point at least ``2w + 4``, so that
    the window fills and then more than ``w`` pairs leave it (a step that never drops the pair leaving the window
    agrees with the forward pass until the window is full)."""
    return short if point.weights != "window" else max(short, 2 * point.param("window") + 4)


def _case(point: Point, seed: int, d_k: int, d_v: int) -> dict:
    """One sequence for one head: inputs ``(T, D)``, at a window point over twice the window (:func:`_length`)."""
    gen = torch.Generator().manual_seed(seed)
    T = _length(point, 12)
    norms = 0.6 + 0.8 * torch.rand(T, 1, generator=gen, dtype=torch.float64)  # keys of different lengths
    k = torch.randn(T, d_k, generator=gen, dtype=torch.float64)
    k = norms * k / torch.linalg.vector_norm(k, dim=-1, keepdim=True)
    case = {
        "q": torch.randn(T, d_k, generator=gen, dtype=torch.float64),
        "k": k,
        "v": torch.randn(T, d_v, generator=gen, dtype=torch.float64),
        "beta": 0.1 + 0.6 * torch.rand(T, generator=gen, dtype=torch.float64),
    }
    if point.weights == "gates":
        g = -1.2 * torch.rand(T, generator=gen, dtype=torch.float64)
        g[T // 2] = -4.0  # one token closes the gate almost shut
    elif point.weights == "decay":
        g = torch.full((T,), math.log(point.param("gamma")), dtype=torch.float64)
    else:
        g = torch.zeros(T, dtype=torch.float64)
    case["g"] = g
    return case


def point_outputs(point: Point, q, k, v, beta, g, layer: TestTimeRegression | None = None) -> torch.Tensor:
    """The regression framework's outputs ``(T, D_v)`` at ``point`` (its ``layer``, built if not given) for one
    head's sequence (``scale = 1``).

    The per-token inputs are those :func:`check_my_step` gives a step: ``beta`` and ``g`` ``(T,)``, ``g`` used where
    the point's weights are gates; ``k`` steps per token step ``k`` times on the token's pair.
    """
    rows = point.param("steps") if point.optimizer == "steps_per_token" else 1
    options = {"scale": 1.0}
    if point.optimizer in STEPPED:
        options["beta"] = beta.repeat_interleave(rows)[None, :, None]
    if point.weights == "gates":
        options["g"] = g[None, :, None]
    K, V = (x.repeat_interleave(rows, 0)[None, :, None] for x in (k, v))
    o, _ = (point.layer() if layer is None else layer)(q[None, :, None], K, V, **options)
    return o[0, :, 0]


def _looped(my_step: Callable, initial_state: Callable) -> Callable:
    """The learner's step run over a sequence from their initial state: outputs ``(T, D_v)``."""

    def run(q, k, v, beta, g):
        state = initial_state(d_k=k.shape[-1], d_v=v.shape[-1])
        outputs = []
        for t in range(q.shape[0]):
            result = my_step(state, q[t], k[t], v[t], beta[t], g[t])
            if not (isinstance(result, tuple) and len(result) == 2):
                raise CheckFailed(f"my_step must return (o, state), a pair; got {type(result).__name__}")
            o, state = result
            if not isinstance(o, torch.Tensor) or o.shape != v[t].shape:
                got = tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__
                raise CheckFailed(f"my_step must return (o, state) with o of shape {tuple(v[t].shape)}; got {got}")
            outputs.append(o)
        return torch.stack(outputs)

    run.__name__ = getattr(my_step, "__name__", "my_step")
    run.__wrapped__ = my_step
    return run


def _what_it_computes(run: Callable, point: Point) -> str:
    """The point one choice away (or the named layer) whose outputs the learner's update reproduces, in words."""
    case = _case(point, 1300, 4, 3)
    try:
        got = run(**case)
    except Exception:  # any error: the failure already reported says what went wrong
        return ""
    if not isinstance(got, torch.Tensor) or not torch.isfinite(got).all():
        return ""
    candidates = []
    for axis in AXES:
        for key in CHOICES[axis]:
            other = point.replace(axis, key)
            if key != getattr(point, axis) and other.function_class == "linear" and other.problem() is None:
                candidates.append((axis, other))
    if point.optimizer == "implicit_step":  # the step size of unit keys: right on the mixer's keys, wrong here
        sgd, unit = point.replace("optimizer", "online_sgd"), {**case, "beta": case["beta"] / (1 + case["beta"])}
        if relative_error(got, point_outputs(sgd, **unit)) < 1e-6:
            return (
                "\n  your step uses ε = β/(1+β), which is right only for unit keys: the implicit step's size is "
                "ε = β/(1+β‖k‖²), and the check's keys have lengths from 0.6 to 1.4"
            )
    for axis, other in candidates:
        if not _tells_apart(other, case["q"].shape[0]):
            continue
        if relative_error(got, point_outputs(other, **case)) < 1e-6:
            named = identify(other).name
            name = f" ({LAYER_LABELS[named]})" if named else ""
            choices = " · ".join(other.choice(a).label for a in AXES)
            return f"\n  your outputs are those of {choices}{name}: {_hint(point, other, axis, 'update')}"
    return ""


def _tells_apart(other: Point, T: int) -> bool:
    """Whether a sequence of ``T`` tokens can tell ``other`` from the point it neighbours: not a window of ``T``
    pairs or more (there it is the uniform layer, so a right answer would be named as that window)."""
    return other.weights != "window" or other.param("window") < T


def _hint(point: Point, other: Point, axis: str | None, subject: str) -> str:
    """What the learner's ``subject`` ("update", "layer") got wrong when it computes ``other``, a neighbour of
    ``point`` on ``axis`` (None: a named layer further away)."""
    if axis == "weights":
        if point.weights == "window" and other.weights == "uniform":
            return f"your {subject} ignores the window (it keeps every pair)"
        return f"your {subject} ignores or mistakes the weights"
    if axis == "optimizer":
        return f"your {subject} takes another optimiser's step"
    return ""


#: The chapter's suggested point: gated weights, a linear memory, the exact solve by recursive least squares (gated
#: RLS: Sherman–Morrison with a forgetting factor, whose ridge fades with the data). No named layer computes it, even
#: on unit keys with a step or gate of its own: Mesa's ridge stays, and no rank-one step along ``k_t`` is RLS's.
SUGGESTED = Point.of("gates", "linear", "rls")


def _zero_state(d_k: int, d_v: int) -> torch.Tensor:
    return torch.zeros(d_k, d_v, dtype=torch.float64)


def check_my_step(my_step: Callable, initial_state: Callable = _zero_state, point: Point = SUGGESTED) -> bool:
    """Check ``my_step(state, q, k, v, beta, g) -> (o, state)`` from ``initial_state(d_k, d_v)`` at ``point``
    (defaults: a zero ``D_k × D_v`` state, which suits first-order points only, and the chapter's suggested point
    :data:`SUGGESTED`, whose state is ``(S, P)``: pass your own ``initial_state`` there).

    Over 4 sequences (different ``D_k``, ``D_v``, key lengths, step sizes and gates; longer than a window), the
    outputs of the learner's loop must be the framework's at ``point``: the objective's weights, its class and its
    optimiser, with the point's parameters (``point.param("ridge")``, ``"window"``, ...).

    Raises:
        CheckFailed: the point is invalid, not linear, or a named layer's (or computes one on every input); a wrong
            output, with the neighbouring point it computes if it is one; a call of the framework itself.
    """
    _refuse_occupied(point)
    run = _looped(my_step, initial_state)
    choices = point.objects()

    def reference(q, k, v, beta, g):  # builds the framework's layer here: a step that calls it is not an answer
        return point_outputs(point, q, k, v, beta, g, layer=TestTimeRegression(*choices))

    cases = [_case(point, 1300 + i, d_k, d_v) for i, (d_k, d_v) in enumerate(((3, 2), (4, 3), (2, 4), (5, 3)))]
    try:
        return run_check("my_step", run, reference, cases, rtol=1e-6, atol=1e-9)
    except CheckFailed as failure:
        raise CheckFailed(f"{failure}{_what_it_computes(run, point)}") from None


# -- part 2: the learner's point as a token mixer ----------------------------------------------------------------------

_HIDDEN, _HEADS, _BATCH = 16, 2, 2


def _layer(spec: Any) -> Any:
    """The learner's layer at the check's size, in float64, with seeded weights."""
    torch.manual_seed(1313)
    return spec(_HIDDEN, _HEADS).double()


def _op_case(point: Point, seed: int) -> dict:
    """The op's inputs for ``B = 2`` sequences of ``H = 2`` heads: unit keys and queries (as the layers make them),
    step sizes in ``(0, 1)``, gates in ``(0, 1]``; at a window point over twice the window (:func:`_length`)."""
    gen = torch.Generator().manual_seed(seed)
    T = _length(point, 10)
    D = _HIDDEN // _HEADS

    def unit(*shape):
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)

    return {
        "q": unit(_BATCH, T, _HEADS, D),
        "k": unit(_BATCH, T, _HEADS, D),
        "v": torch.randn(_BATCH, T, _HEADS, D, generator=gen, dtype=torch.float64),
        "beta": 0.05 + 0.9 * torch.rand(_BATCH, T, _HEADS, generator=gen, dtype=torch.float64),
        "g": -torch.rand(_BATCH, T, _HEADS, generator=gen, dtype=torch.float64),
    }


def _probe_case(point: Point) -> dict:
    """:func:`_op_case`, with each sequence's second key orthogonal to its first: then every step of a rank-one
    update can be read off the outputs (:func:`_named_up_to_steps`)."""
    case = _op_case(point, 1450)
    k0, k1 = case["k"][:, 0], case["k"][:, 1]
    k1 = k1 - (k1 * k0).sum(-1, keepdim=True) * k0
    case["k"][:, 1] = k1 / torch.linalg.vector_norm(k1, dim=-1, keepdim=True)
    return case


#: What the rank-one fit calls the layers it reproduces: with a delta term, and without one.
_FAMILIES = ("gated DeltaNet", "gated linear attention")


def _named_up_to_steps(case: dict, outputs: Any, norm_weight: torch.Tensor | None = None) -> str | None:
    """Whether ``outputs`` ``(B, T, H, D_v)`` on ``case`` (unit keys) are those of a named first-order layer with a
    step and a gate of their own at every token: the family ``S_t = a_t S_{t-1} + k_t (b_t v_t − c_t S_{t-1}^T k_t)^T``,
    ``o_t ∝ S_t^T q_t``, which holds linear attention, gated linear attention, DeltaNet, gated DeltaNet and Longhorn
    (and DeltaProduct on one pair) for any β and g. Token by token, the three numbers ``a_t, b_t, c_t`` are fitted by
    least squares to the output's direction (an output norm hides its scale, and the family absorbs a scale into the
    next token's numbers); the outputs are the family's when every token fits to a relative ``1e-8``. Returns the
    family's name (:data:`_FAMILIES`: with a delta term ``c_t``, or without), or None."""
    if not isinstance(outputs, torch.Tensor) or outputs.shape != case["v"].shape or not outputs.is_floating_point():
        return None
    q, k, v = case["q"], case["k"], case["v"]
    o = outputs.detach().to(torch.float64)
    if norm_weight is not None and norm_weight.shape == o.shape[-1:] and bool((norm_weight != 0).all()):
        o = o / norm_weight.detach().to(torch.float64)  # an RMSNorm's gain: what is left is the output's direction
    if not bool(torch.isfinite(o).all()):
        return None
    S = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])
    delta = 0.0
    for t in range(q.shape[1]):
        qt, kt, vt, ot = q[:, t], k[:, t], v[:, t], o[:, t]
        kq = (kt * qt).sum(-1, keepdim=True)
        Sk = torch.einsum("bhkv,bhk->bhv", S, kt)
        basis = torch.stack([torch.einsum("bhkv,bhk->bhv", S, qt), vt * kq, -Sk * kq], -1)
        x = torch.linalg.lstsq(basis, ot[..., None], driver="gelsd").solution[..., 0]
        miss = torch.linalg.vector_norm((basis @ x[..., None])[..., 0] - ot, dim=-1)
        if bool((miss > 1e-8 * torch.linalg.vector_norm(ot, dim=-1).clamp_min(1e-12)).any()):
            return None
        delta = max(delta, float((x[..., 2].abs() / x.abs().amax(-1).clamp_min(1e-300)).max()))
        S = x[..., 0, None, None] * S + kt[..., :, None] * (x[..., 1, None] * vt - x[..., 2, None] * Sk)[..., None, :]
    return _FAMILIES[0] if delta > 1e-6 else _FAMILIES[1]


def _takes(point: Point) -> tuple[str, ...]:
    """The op inputs the point uses besides ``q, k, v``."""
    return ("beta",) * (point.optimizer in STEPPED) + ("g",) * (point.weights == "gates")


def _framework_mix(point: Point, layer: Any, q, k, v, beta, g, regression: Any = None) -> torch.Tensor:
    """What ``mix`` must return at ``point``: the framework's output (fla's scale ``D^-1/2``), through the layer's
    ``o_norm`` when it has one."""
    rows = point.param("steps") if point.optimizer == "steps_per_token" else 1
    options: dict = {}
    if point.optimizer in STEPPED:
        options["beta"] = beta.repeat_interleave(rows, 1)
    if point.weights == "gates":
        options["g"] = g
    K, V = k.repeat_interleave(rows, 1), v.repeat_interleave(rows, 1)
    o = (point.layer() if regression is None else regression)(q, K, V, **options)[0]
    norm = getattr(layer, "o_norm", None)
    return norm(o) if norm is not None else o


def _mixed(layer: Any, point: Point) -> Callable:
    """The learner's ``mix`` called with the op inputs the point takes (``q, k, v`` and, where the point takes them,
    ``beta`` and ``g``); a ``beta`` or ``g`` parameter the point does not take gets None, so a ``mix`` that kept the
    stub's parameters runs at any point."""
    import inspect

    try:
        accepts = set(inspect.signature(layer.mix).parameters)
    except (TypeError, ValueError):
        accepts = set()

    def mix(q, k, v, beta, g):
        given = {"beta": beta, "g": g}
        inputs = {"q": q, "k": k, "v": v}
        inputs.update({name: None for name in ("beta", "g") if name in accepts})  # not taken by the point: None
        inputs.update({name: given[name] for name in _takes(point)})
        nones = [name for name, x in inputs.items() if x is None]
        with torch.no_grad():
            try:
                return layer.mix(**inputs)
            except Exception as err:
                if not nones and not (isinstance(err, TypeError) and "argument" in str(err)):
                    raise  # the learner's own bug, reported with its case
                takes = ", ".join(["q", "k", "v", *_takes(point)] + [f"{name}=None" for name in nones])
                raise CheckFailed(
                    f"your mix raised {type(err).__name__}: {err}\n  the check called mix({takes}): the inputs your "
                    f"point {point.describe()} takes, as op_inputs should return them"
                    + (f" (it takes no {' and no '.join(nones)}: " if nones else " (")
                    + "give mix and mix_step exactly those parameters: drop beta where your point has no step size, "
                    "g where its weights are not gates)"
                ) from None

    mix.__name__ = "mix"
    mix.__wrapped__ = layer.mix
    return mix


def _step_gap(layer: Any) -> Callable:
    """``max |step − forward|`` relative to ``max |forward|`` over a sequence: 0 when the two forms agree."""

    def gap(x):
        with torch.no_grad():
            full = layer(x)
            state, outputs = layer.initial_state(x.shape[0]), []
            for t in range(x.shape[1]):
                o, state = layer.step(x[:, t], state)
                outputs.append(o)
        return float((torch.stack(outputs, 1) - full).abs().max() / full.abs().max())

    gap.__name__ = "step_vs_forward"
    gap.__wrapped__ = layer.mix_step
    return gap


def _lookahead(layer: Any, point: Point) -> Callable:
    """``max |Δ output|`` at the first 6 positions when the inputs from position 6 on change: 0 for a causal layer."""

    def change(x):
        later = x.clone()
        later[:, 6:] += 1.0
        with torch.no_grad():
            try:
                now, then = layer(x), layer(later)
            except TypeError as err:
                if "argument" not in str(err):
                    raise
                takes = ", ".join(["q", "k", "v", *_takes(point)])
                raise CheckFailed(
                    f"your layer's forward raised TypeError: {err}\n  forward calls mix(**op_inputs(...)): mix and "
                    f"mix_step must take exactly the names op_inputs returns. Your point {point.describe()} takes "
                    f"{takes}: return those from op_inputs, and drop beta where your point has no step size, g where "
                    "its weights are not gates"
                ) from None
        if not (bool(torch.isfinite(now).all()) and bool(torch.isfinite(then).all())):
            _check_op_inputs(layer, point)  # a raw gate or step says so
            raise CheckFailed(f"your layer's output is not finite on {x.shape[1]} tokens of random input")
        return float((now[:, :6] - then[:, :6]).abs().max())

    change.__name__ = "lookahead"
    change.__wrapped__ = layer.mix
    return change


def _check_op_inputs(layer: Any, point: Point) -> None:
    """What the exercise asks of ``op_inputs``, on 64 tokens of random input: ``beta`` in ``(0, 1)`` and ``g ≤ 0``
    ``(B, T, H)`` where the point takes them, and a forward pass that stays finite. (A raw projection as the gate
    makes ``exp(g) > 1``: the memory grows without bound, and the layer's output is NaN within 64 tokens.)"""
    x = 2 * torch.randn(_BATCH, 64, _HIDDEN, generator=torch.Generator().manual_seed(1600), dtype=torch.float64)
    with torch.no_grad():
        inputs = layer.project(x)
        rules = {
            "beta": ("in (0, 1)", "torch.sigmoid", lambda b: (b > 0) & (b < 1)),
            "g": ("≤ 0", "torch.nn.functional.logsigmoid", lambda g: g <= 0),
        }
        for name in _takes(point):
            what, squash, holds = rules[name]
            got = inputs.get(name) if isinstance(inputs, dict) else None
            if not isinstance(got, torch.Tensor) or got.shape != (_BATCH, 64, _HEADS):
                shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                raise CheckFailed(
                    f"my_mixer: op_inputs must return {name!r} of shape (B, T, H) = {(_BATCH, 64, _HEADS)}; got {shape}"
                )
            if not bool(holds(got).all()):
                raise CheckFailed(
                    f"my_mixer: op_inputs gave {name} from {got.min().item():.3g} to {got.max().item():.3g} on 64 "
                    f"tokens of random input; the exercise asks for {name} {what} (pass the projection through "
                    f"{squash})"
                )
        output = layer(x)
    if not bool(torch.isfinite(output).all()):
        raise CheckFailed("my_mixer: your layer's output is not finite over 64 tokens of random input")


def _what_the_layer_computes(mix: Callable, layer: Any, point: Point) -> str:
    """The point one choice away, or the named layer, whose output the learner's ``mix`` reproduces, in words; else
    the first-order family it computes up to a change of step and gate (:func:`_named_up_to_steps`). Exact matches
    come first: a named layer's own op is named as itself, not as the family that holds it."""
    case = _op_case(point, 1400)
    try:
        got = mix(**case)
    except Exception:  # any error: the failure already reported says what went wrong
        return ""
    if not isinstance(got, torch.Tensor):
        return ""
    T = case["q"].shape[1]
    candidates: list[tuple[str | None, Point]] = [
        (None, point)
    ]  # the point's own output (the framework renamed): the failure already says why
    candidates += [
        (axis, point.replace(axis, key)) for axis in AXES for key in CHOICES[axis] if key != getattr(point, axis)
    ]
    candidates += [(None, named_point(name)) for name in NAMED_LAYERS]
    for axis, other in candidates:
        if other.function_class != "linear" or other.problem() is not None or other.optimizer == "steps_per_token":
            continue
        if not _tells_apart(other, T):
            continue
        try:
            want = _framework_mix(other, layer, **case)
        except (ValueError, TypeError):
            continue
        if got.shape == want.shape and relative_error(got, want) < 1e-6:
            if other == point:
                return ""
            named = identify(other).name
            name = f" ({LAYER_LABELS[named]})" if named else ""
            hint = _hint(point, other, axis, "layer")
            return f"\n  your mix computes {' · '.join(other.choice(a).label for a in AXES)}{name}" + (
                f": {hint}" if hint else ""
            )
    probe = _probe_case(point)
    try:
        family = _named_up_to_steps(probe, mix(**probe), getattr(getattr(layer, "o_norm", None), "weight", None))
    except Exception:  # any error: the failure already reported says what went wrong
        family = None
    if family is not None:
        return (
            f"\n  your mix computes {family} with a step size and a gate of its own at each token: a named layer up "
            "to a change of β and g, not your point"
        )
    return ""


def check_my_mixer(spec: Any, point: Point = SUGGESTED) -> bool:
    """Check the learner's mixer, one class and one spec, at ``point`` (default :data:`SUGGESTED`); ``spec`` is the
    :class:`~ttr_edu.layers.MixerSpec`, or a function that builds it.

    The spec must be registered (``register(spec)``) and name no layer of ``NAMED_LAYERS``; built at
    ``hidden_size = 16``, two heads, in float64:

    * it is causal: outputs do not change when later inputs do (tested first: a layer that looks ahead fails every
      other test too, and is told that it looks ahead);
    * its ``mix`` on unit keys and queries, step sizes and gates is the regression framework's output at ``point``
      (through the layer's ``o_norm`` if it has one; otherwise at fla's scale ``D^-1/2``): the op is the point's. It
      is called with the inputs the point takes (a ``beta`` or ``g`` parameter the point does not take gets None);
    * its ``step``, token by token from ``initial_state``, gives its ``forward``;
    * it computes none of the named layers on the same inputs, nor a first-order named layer with a step size and a
      gate of its own at each token (:func:`_named_up_to_steps`; the point itself is refused when the framework's
      output there is one, as the gated implicit step's is on unit keys).

    Raises:
        CheckFailed: a spec that is not registered or that claims a named layer; a point a named layer occupies;
            a ``mix`` that computes another point (named, when it is one of the point's neighbours or a named layer),
            a step that disagrees with the forward pass, a look ahead, a call of the framework itself.
    """
    from ttr_edu.layers import REGISTRY, Mixer, MixerSpec

    _refuse_occupied(point, "my_mixer")
    if not isinstance(spec, MixerSpec) and callable(spec):  # a function that builds the spec: run it first
        try:
            spec = spec()
        except NotImplementedError as err:
            if not _is_untouched_stub(err):
                raise CheckFailed(f"my_mixer: building your spec raised NotImplementedError: {err}") from None
            if under_autograder():
                raise CheckFailed("my_mixer: not attempted (the stub still raises NotImplementedError)") from None
            not_attempted("my_mixer", "fill in your mixer's methods, run its cell, then run this check again.")
            return False
        except Exception as err:  # anything else the function raised: the learner's own bug
            raise CheckFailed(f"my_mixer: building your spec raised {type(err).__name__}: {err}") from None
    if not isinstance(spec, MixerSpec) or not issubclass(spec.layer, Mixer):
        raise CheckFailed(f"my_mixer: expected your MixerSpec(name, label, YourClass), got {type(spec).__name__}")
    if REGISTRY.get(spec.name) is not spec:
        raise CheckFailed(f"my_mixer: register your spec first: register({spec.name!r} spec, replace=True)")
    if spec.named_layer is not None:
        raise CheckFailed(
            f"my_mixer: your spec says it is the named layer {spec.named_layer!r}; the capstone's point has no name "
            "(leave named_layer=None)"
        )
    layer = _layer(spec)
    mix = _mixed(layer, point)
    choices = point.objects()
    T = _length(point, 9)  # at a window point, step == forward past the window's filling
    inputs = [
        {"x": torch.randn(_BATCH, T, _HIDDEN, generator=torch.Generator().manual_seed(s), dtype=torch.float64)}
        for s in (1500, 1501)
    ]
    try:  # first: a layer that looks ahead fails every later test too, and should hear why
        if not run_check("my_mixer (causal)", _lookahead(layer, point), lambda x: 0.0, inputs, rtol=0.0, atol=1e-9):
            return False  # a method is still the stub
    except CheckFailed as failure:
        if "your function raised" in str(failure) or "not finite" in str(failure):
            raise
        raise CheckFailed(
            f"{failure}\n  your layer looks ahead: its output at t depends on tokens after t (the outputs before "
            "token 6 change when later tokens change). Use only tokens ≤ t in op_inputs and in mix"
        ) from None

    def reference(q, k, v, beta, g):  # the framework at the point, built here: a mix that calls it is not an answer
        return _framework_mix(point, layer, q, k, v, beta, g, regression=TestTimeRegression(*choices))

    cases = [_op_case(point, 1400 + i) for i in range(3)]
    try:
        if not run_check("my_mixer (its op)", mix, reference, cases, rtol=1e-6, atol=1e-9):
            return False
    except CheckFailed as failure:
        raise CheckFailed(f"{failure}{_what_the_layer_computes(mix, layer, point)}") from None
    _check_op_inputs(layer, point)
    try:
        if not run_check("my_mixer (step == forward)", _step_gap(layer), lambda x: 0.0, inputs, rtol=0.0, atol=1e-9):
            return False  # mix_step is still the stub
    except CheckFailed as failure:
        raise CheckFailed(
            f"{failure}\n  your layer's step() gives other outputs than its forward(): mix_step must take the same "
            "step as mix, one token at a time, starting from memory=None (what initial_state hands mix_step first)"
        ) from None
    case = cases[0]
    ours = mix(**case)
    for name in NAMED_LAYERS:
        other = named_point(name)
        if other.function_class != "linear" or other.optimizer == "steps_per_token":
            continue  # a kernel cache, an MLP or several pairs per token: not this layer's inputs
        if relative_error(ours, _framework_mix(other, layer, **case)) < 1e-6:
            raise CheckFailed(f"my_mixer: your layer computes {LAYER_LABELS[name]}, a named layer, on these inputs")
    probe = _probe_case(point)
    family = _named_up_to_steps(probe, mix(**probe), getattr(getattr(layer, "o_norm", None), "weight", None))
    if family is not None:
        raise CheckFailed(
            f"my_mixer: your layer computes {family} with a step size and a gate of its own at each token: a named "
            "layer up to a change of β and g"
        )
    print(f"PASS my_mixer: {spec.name} is {point.describe()}, distinct from every named layer.")
    return True
