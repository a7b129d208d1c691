"""Checks for chapter 13, design your own memory: the capstone, a point of the design space no named layer occupies.

* ``check_my_step(my_step, initial_state, point)``: the learner's recurrent update of one head, token by token,
  against the regression framework at the learner's own point (:class:`ttr_edu.regression.design_space.Point`): the
  objective the update must come from. A point a named layer occupies (or computes on every input: a constant
  gate, one step per token) is refused; a wrong update is reported with the point it computes instead, when it is
  one (an update that ignores the weights computes the same point with uniform weights);
* ``check_my_mixer(spec, point)``: the learner's token mixer (one class, one registered spec): its ``mix`` is the
  framework's output at the point, its ``step`` equals its ``forward``, it is causal, and it computes no named layer.

Both are declared for the grading engine as staged checks (:func:`ttr_edu.checks._rules.staged`): where the answer
runs, the point becomes plain data (:func:`_point_data`) and the answer's outputs on the cases it sets are recorded
(``_collect_*``); the grader rebuilds the point (:func:`_rebuilt`), builds the cases and the framework's references
itself and judges (``_judge_*``). The check in the student's kernel runs both halves on the same plain record.

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

from ttr_edu.checks import _core
from ttr_edu.checks._core import CheckFailed, _is_untouched_stub, relative_error
from ttr_edu.checks._guard import Forbidden
from ttr_edu.checks._rules import (
    Exercise,
    NotAttempted,
    Outcome,
    answer_outcome,
    judge_case,
    outcome_from,
    staged,
)
from ttr_edu.regression import NAMED_LAYERS, TestTimeRegression
from ttr_edu.regression.design_space import AXES, CHOICES, LAYER_LABELS, PARAMS, Point, identify, named_point

__all__ = ["check_my_step", "check_my_mixer", "point_outputs", "STEPPED", "SUGGESTED", "PARAM_RANGES"]

#: the optimisers that take the per-token step size ``beta``
STEPPED = ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum")


def _refuse_occupied(point, name: str = "my_step") -> None:
    """The capstone's rules about the point itself (rebuilt by :func:`_rebuilt`), before any answer is judged."""
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


# -- the point, as plain data: what crosses from the answer's process to the grader ---------------------------------


def _point_data(point: Any) -> dict:
    """The learner's point as plain data: its three choices and its parameters (names and numbers), or the type of
    what was given instead of a point."""
    if not isinstance(point, Point):
        return {"not_a_point": type(point).__name__}
    return {
        "weights": str(point.weights),
        "function_class": str(point.function_class),
        "optimizer": str(point.optimizer),
        "params": {str(k): v for k, v in dict(point.params).items()},
    }


def _rebuilt(data: Any, name: str) -> Point:
    """The point of :func:`_point_data`'s data, rebuilt and validated with :meth:`Point.of` (in the grader: nothing of
    the learner's object is used).

    Raises:
        CheckFailed: not a point, or choices and parameters that make none.
    """
    if isinstance(data, dict) and "not_a_point" in data:
        got = data["not_a_point"] if isinstance(data["not_a_point"], str) else "?"
        raise CheckFailed(f"{name}: expected your point as a design_space.Point (Point.of(...)), got {got}")
    keys = ("weights", "function_class", "optimizer")
    params = data.get("params") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or not all(isinstance(data.get(k), str) for k in keys)
        or not isinstance(params, dict)
        or not all(isinstance(k, str) and type(v) in (int, float, bool, str) for k, v in params.items())
    ):
        raise CheckFailed(f"{name}: the grader could not read back your point (its choices and numbers)")
    try:
        point = Point.of(*(data[k] for k in keys), **params)
    except (ValueError, KeyError, TypeError) as err:
        raise CheckFailed(f"{name}: your point makes no design-space point: {err}") from None
    for param, value in point.params:
        _refuse_out_of_range(param, value, name)
    return point


#: The range the capstone's checks take each parameter of a point in (both ends included): the explorer's values
#: (``design_space.PARAMS``) and more, but bounded. The grader's own references run at the point, and their cost grows
#: with the integers (a window of ``w`` makes test sequences of ``2w + 4`` tokens, whose judging cost grows like
#: ``T^2``: 146 s and 3.2 GB of the grader at ``w = 1000``, a37e); no right answer needs more than these.
PARAM_RANGES: dict[str, tuple[float, float]] = {
    "window": (1, 64),
    "steps": (1, 8),
    "cg_steps": (1, 16),
    "mini_batch_size": (1, 32),
    "gamma": (0.01, 1.0),
    "gate_rest": (0.0, 1.0),
    "gate_switch": (0.0, 1.0),
    "sharpness": (0.01, 1000.0),
    "lr": (1e-4, 16.0),
    "beta": (1e-4, 16.0),
    "eta": (0.0, 1.0),
    "alpha": (0.0, 1.0),
    "ridge": (1e-4, 100.0),
}
#: the parameters that count something (pairs, steps): integers
_COUNTS = ("window", "steps", "cg_steps", "mini_batch_size")


def _refuse_out_of_range(param: str, value: Any, name: str) -> None:
    """CheckFailed, naming the parameter, its range and ``value``, where a point's parameter is outside
    :data:`PARAM_RANGES` (or of the wrong type: a count is an integer, the rest finite numbers; ``kernel`` one of
    the explorer's kernels)."""
    if param == "kernel":
        kernels = PARAMS["kernel"].values
        if value not in kernels:
            raise CheckFailed(f"{name}: the parameter kernel of your point is {value!r}; the check takes {kernels}")
        return
    if param not in PARAM_RANGES:
        raise CheckFailed(f"{name}: the parameter {param} of your point has no range the check takes")
    low, high = PARAM_RANGES[param]
    count = param in _COUNTS
    kind = "an integer" if count else "a finite number"
    numeric = (int,) if count else (int, float)
    readable = not isinstance(value, bool) and isinstance(value, numeric) and math.isfinite(value)
    if not readable or not low <= value <= high:
        raise CheckFailed(
            f"{name}: the parameter {param} of your point ({PARAMS[param].symbol}) is {value!r}; the check takes "
            f"{kind} from {low:g} to {high:g} (a right answer needs no more, and the grader runs the references at "
            "your point)"
        )


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


def _what_it_computes(got: Any, point: Point) -> str:
    """The point one choice away (or the named layer) whose outputs the learner's update reproduces, in words
    (``got``: the learner's outputs on :func:`_explain_case`)."""
    case = _explain_case(point)
    if not _core._is_plain_tensor(got) or got.shape != case["v"].shape or not torch.isfinite(got).all():
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
    return _slip(got, point, case, 0, lambda p, c: point_outputs(p, **c), "update")


def _slip(got: torch.Tensor, point: Point, case: dict, time: int, outputs: Callable, subject: str) -> str:
    """The two slips that keep the point but not its rule, in words, or ``""``: a window one pair too long or too
    short, and an answer read from the memory before the token's pair is written. ``case``'s tensors have the time
    axis at ``time``; ``outputs(point, case)`` is the framework's (as the check compares them)."""
    if point.weights == "window":
        w = point.param("window")
        for other, what in ((w + 1, "one pair too many"), (w - 1, "one pair too few")):
            if other < 1 or not _tells_apart(point.replace(window=other), case["q"].shape[time]):
                continue
            if relative_error(got, outputs(point.replace(window=other), case)) < 1e-6:
                return (
                    f"\n  your {subject} keeps {what}: its outputs are those of a window of {other} pairs. Token t's "
                    f"window is pairs t − {w - 1} to t, the new one included: pair t − {w} leaves as pair t enters"
                )
    T = case["q"].shape[time]
    cut = {name: x.narrow(time, 0, T - 1) for name, x in case.items()}
    cut["q"] = case["q"].narrow(time, 1, T - 1)  # token t's query against the memory of pairs up to t - 1
    before = outputs(point, cut)
    before = torch.cat([torch.zeros_like(before.narrow(time, 0, 1)), before], time)  # nothing written before t = 0
    if relative_error(got, before) < 1e-6:
        return (
            f"\n  your {subject} answers token t from the memory before its pair is written (S_{{t−1}}ᵀq_t): "
            "write the token's pair first, then read the answer (S_tᵀq_t)"
        )
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


def _step_cases(point: Point) -> list[dict]:
    """:func:`check_my_step`'s 4 sequences: different ``D_k``, ``D_v``, key lengths, step sizes and gates."""
    return [_case(point, 1300 + i, d_k, d_v) for i, (d_k, d_v) in enumerate(((3, 2), (4, 3), (2, 4), (5, 3)))]


def _explain_case(point: Point) -> dict:
    """The sequence on which a wrong update is compared with the point's neighbours (:func:`_what_it_computes`)."""
    return _case(point, 1300, 4, 3)


def _step_exercise(point: Point | None = None) -> Exercise:
    """13.1 as one exercise of :mod:`~ttr_edu.checks._rules`: the answer is the learner's loop (:func:`_looped`),
    the reference the framework at ``point`` (built here: a step that calls it is not an answer)."""
    if point is None:
        return Exercise("my_step", _no_reference, list)
    choices = point.objects()

    def reference(q, k, v, beta, g):
        return point_outputs(point, q, k, v, beta, g, layer=TestTimeRegression(*choices))

    return Exercise("my_step", reference, lambda: _step_cases(point), rtol=1e-6, atol=1e-9)


def _no_reference(**case: Any) -> Any:
    raise RuntimeError("the reference runs in the grader, not where the answer runs")


#: What the chapter hands the student for 13.1, to call inside the step: a point's parameters (``MY_POINT.param``) and
#: the methods that read them. Every other function of the package is refused while the answer runs (the allow-list,
#: :meth:`~ttr_edu.checks._rules.Staged.held_to`): the framework's solvers (``SOLVERS``, ``LINEAR_SOLVERS``,
#: ``LOCAL_SOLVERS``, ``momentum_sgd``, the window runner), its mixer, the ops, whatever a point builds.
GIVEN_STEP = (Point.param, Point.default, Point.choice, Point.used, Point.describe, Point.of, Point.__post_init__)


def _given_mixer() -> tuple:
    """What the chapter hands the student for 13.2: the point's parameters and the ``Mixer`` base class to subclass
    (its pipeline: projections, short convolution, ``_normed_qk``, ``_heads``, ``forward`` and ``step``)."""
    from ttr_edu.layers import Mixer

    return (*GIVEN_STEP, Mixer)


def _forbidden() -> Forbidden:
    """What the learner's code may not call besides what the allow-list leaves out: the framework's layer, which the
    references use (its methods), and the functions here that compute a reference (the harness is not on the list)."""
    codes = _core._methods(TestTimeRegression)
    for fn in (point_outputs, _framework_mix):
        codes.update(_core.implementations(fn))
    message = (
        "your function calls the package's own implementation ({}); the exercise is to write it yourself, so this "
        "does not count as an answer"
    )
    return Forbidden(codes={code: message.format(label) for code, label in codes.items()})


def _collect_step(arguments: tuple, guard: Callable) -> dict:
    """13.1, where the answer runs: the point as data, and the learner's loop on each case and on the explaining
    sequence (each call an :class:`~ttr_edu.checks._rules.Outcome`)."""
    my_step, initial_state, point = arguments
    record: dict[str, Any] = {"point": _point_data(point)}
    try:
        point = _rebuilt(record["point"], "my_step")
    except CheckFailed:
        return record  # the grader says why
    if not callable(my_step):
        record["not_callable"] = type(my_step).__name__
        return record
    run, declared = _looped(my_step, initial_state), _step_exercise()
    record["cases"] = [answer_outcome(declared, run, case, i, guard=guard) for i, case in enumerate(_step_cases(point))]
    record["explain"] = answer_outcome(declared, run, _explain_case(point), -1, guard=guard)
    return record


def _judge_step(record: dict, say: Callable[[str], None]) -> None:
    """13.1, in the grader: the point rebuilt and refused where a named layer occupies it, then each case judged
    against the framework at that point (:func:`~ttr_edu.checks._rules.judge_case`)."""
    point = _rebuilt(record.get("point"), "my_step")
    _refuse_occupied(point)
    if "not_callable" in record:
        raise CheckFailed(f"my_step: expected your function, got {record['not_callable']}")
    declared = _step_exercise(point)
    cases, outcomes = list(declared.cases()), record.get("cases")
    if not isinstance(outcomes, list) or len(outcomes) != len(cases):
        raise CheckFailed("my_step: the grader could not read back what your step gave on its cases")
    notes = []
    try:
        for index, (case, data) in enumerate(zip(cases, outcomes)):
            notes.append(judge_case(declared, case, index, outcome_from(data)))
    except CheckFailed as failure:
        try:
            explain = outcome_from(record.get("explain"))
        except CheckFailed:
            explain = Outcome()
        raise CheckFailed(f"{failure}{_what_it_computes(explain.result, point)}") from None
    note = next((n for n in notes if n), "")
    say(
        f"PASS my_step: your function agrees with the reference on {len(cases)} random cases."
        + (f" ({note})" if note else "")
    )


def _zero_state(d_k: int, d_v: int) -> torch.Tensor:
    return torch.zeros(d_k, d_v, dtype=torch.float64)


@staged(
    collect=_collect_step,
    judge=_judge_step,
    forbidden=_forbidden,
    given=GIVEN_STEP,
    empties=True,
    harness=(_looped, _zero_state),  # the loop around the answer and the default state it starts from
)
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
    raise AssertionError("replaced by its declaration (_collect_step, _judge_step)")


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


def _norm_data(layer: Any) -> dict | None:
    """The learner's ``o_norm`` as plain data (None: the layer has none): an RMSNorm's shape, weight and eps, which the
    grader applies itself (:func:`_normed`); another kind is named."""
    norm = getattr(layer, "o_norm", None)
    if norm is None:
        return None
    if type(norm) is not torch.nn.RMSNorm:
        return {"kind": type(norm).__name__}
    weight = norm.weight
    return {
        "kind": "RMSNorm",
        "shape": [int(n) for n in norm.normalized_shape],
        "weight": None if weight is None else torch.Tensor.detach(weight).clone(),
        "eps": None if norm.eps is None else float(norm.eps),
    }


def _normed(o: torch.Tensor, norm: Any) -> torch.Tensor:
    """``o`` through the learner's ``o_norm`` as :func:`_norm_data` describes it (unchanged where there is none).

    Raises:
        CheckFailed: an ``o_norm`` that is no ``torch.nn.RMSNorm``, or one the grader cannot read back.
    """
    if norm is None:
        return o
    if not isinstance(norm, dict) or norm.get("kind") != "RMSNorm":
        kind = norm.get("kind") if isinstance(norm, dict) and isinstance(norm.get("kind"), str) else "?"
        raise CheckFailed(
            f"my_mixer: your layer's o_norm is a {kind}; the check applies the layer's o_norm to the framework's "
            "output from its weight and eps, so make it a torch.nn.RMSNorm (or leave it out)"
        )
    shape, weight, eps = norm.get("shape"), norm.get("weight"), norm.get("eps")
    if (
        not isinstance(shape, list)
        or not all(type(n) is int for n in shape)
        or not (weight is None or (_core._is_plain_tensor(weight) and list(weight.shape) == shape))
        or not (eps is None or type(eps) is float)
    ):
        raise CheckFailed("my_mixer: the grader could not read back your layer's o_norm (its shape, weight and eps)")
    with torch.no_grad():
        return torch.nn.functional.rms_norm(o, shape, None if weight is None else weight.to(o.dtype), eps)


def _framework_mix(point: Point, norm: Any, q, k, v, beta, g, regression: Any = None) -> torch.Tensor:
    """What ``mix`` must return at ``point``: the framework's output (fla's scale ``D^-1/2``), through the layer's
    ``o_norm`` (``norm``: :func:`_norm_data`) when it has one."""
    rows = point.param("steps") if point.optimizer == "steps_per_token" else 1
    options: dict = {}
    if point.optimizer in STEPPED:
        options["beta"] = beta.repeat_interleave(rows, 1)
    if point.weights == "gates":
        options["g"] = g
    K, V = k.repeat_interleave(rows, 1), v.repeat_interleave(rows, 1)
    o = (point.layer() if regression is None else regression)(q, K, V, **options)[0]
    return _normed(o, norm)


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


def _step_outputs(layer: Any) -> Callable:
    """The layer's ``step``, token by token from ``initial_state``, and its ``forward`` over a sequence: the pair of
    outputs ``(B, T, hidden)`` (the grader compares them, :func:`_step_gap`)."""

    def outputs(x):
        with torch.no_grad():
            full = layer(x)
            state, outputs = layer.initial_state(x.shape[0]), []
            for t in range(x.shape[1]):
                o, state = layer.step(x[:, t], state)
                outputs.append(o)
        return torch.stack(outputs, 1), full

    outputs.__name__ = "step_vs_forward"
    outputs.__wrapped__ = layer.mix_step
    return outputs


def _step_gap(pair: Any) -> Any:
    """``max |step − forward|`` relative to ``max |forward|`` (0 when the two forms agree), from
    :func:`_step_outputs`'s pair; what is not such a pair is returned as is (the comparison says what it is)."""
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(_core._is_plain_tensor(x) for x in pair)):
        return pair
    stepped, full = pair
    if stepped.shape != full.shape:
        return f"step outputs of shape {tuple(stepped.shape)}, forward outputs of shape {tuple(full.shape)}"
    return float((stepped.double() - full.double()).abs().max() / full.double().abs().max())


def _lookahead(layer: Any, point: Point) -> Callable:
    """The layer's outputs on a sequence and on the same sequence changed from position 6 on: a causal layer's first
    6 outputs agree (the grader compares them, :func:`_change`)."""

    def outputs(x):
        later = x.clone()
        later[:, 6:] += 1.0
        with torch.no_grad():
            try:
                return layer(x), layer(later)
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

    outputs.__name__ = "lookahead"
    outputs.__wrapped__ = layer.mix
    return outputs


def _change(pair: Any) -> Any:
    """``max |Δ output|`` at the first 6 positions, from :func:`_lookahead`'s pair: 0 for a causal layer; None when an
    output is not finite; what is not such a pair is returned as is."""
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(_core._is_plain_tensor(x) for x in pair)):
        return pair
    now, then = pair
    if not (bool(torch.isfinite(now).all()) and bool(torch.isfinite(then).all())):
        return None
    if now.shape != then.shape or now.dim() < 2:
        return f"outputs of shapes {tuple(now.shape)} and {tuple(then.shape)}"
    return float((now[:, :6].double() - then[:, :6].double()).abs().max())


def _refuse_call(name: str, outcome: Outcome) -> None:
    """A call whose value is judged here rather than compared with a reference: the stub, a broken rule, an error
    or a forbidden call fail as :func:`~ttr_edu.checks._rules.judge_case` fails them."""
    if outcome.not_attempted:
        raise NotAttempted(name)
    for problem in (outcome.broke_rule, outcome.raised, outcome.called):
        if problem is not None:
            raise CheckFailed(f"{name}: {outcome.called or problem}")


_OP_INPUTS_X = 1600  # the seed of op_inputs' 64 tokens of random input


def _op_inputs_x() -> torch.Tensor:
    return 2 * torch.randn(
        _BATCH, 64, _HIDDEN, generator=torch.Generator().manual_seed(_OP_INPUTS_X), dtype=torch.float64
    )


def _project(layer: Any, point: Point) -> Callable:
    """``op_inputs``' ``beta`` and ``g`` (those the point takes, in :func:`_takes`' order) on 64 tokens of random
    input; what is not a dict's tensor comes back as what it is."""

    def inputs(x):
        with torch.no_grad():
            got = layer.project(x)
        return tuple(got.get(name) if isinstance(got, dict) else got for name in _takes(point))

    inputs.__name__ = "op_inputs"
    inputs.__wrapped__ = layer.op_inputs
    return inputs


def _forward(layer: Any) -> Callable:
    def output(x):
        with torch.no_grad():
            return layer(x)

    output.__name__ = "forward"
    output.__wrapped__ = layer.mix
    return output


def _check_op_inputs(record: dict, point: Point) -> None:
    """What the exercise asks of ``op_inputs``, on 64 tokens of random input: ``beta`` in ``(0, 1)`` and ``g ≤ 0``
    ``(B, T, H)`` where the point takes them, and a forward pass that stays finite. (A raw projection as the gate
    makes ``exp(g) > 1``: the memory grows without bound, and the layer's output is NaN within 64 tokens.) Judged
    from the record's ``op_inputs`` and ``op_output`` outcomes."""
    outcome = outcome_from(record.get("op_inputs"))
    _refuse_call("my_mixer", outcome)
    got = outcome.result if isinstance(outcome.result, tuple) else ()
    rules = {
        "beta": ("in (0, 1)", "torch.sigmoid", lambda b: (b > 0) & (b < 1)),
        "g": ("≤ 0", "torch.nn.functional.logsigmoid", lambda g: g <= 0),
    }
    for i, name in enumerate(_takes(point)):
        what, squash, holds = rules[name]
        value = got[i] if i < len(got) else None
        if not _core._is_plain_tensor(value) or value.shape != (_BATCH, 64, _HEADS):
            shape = tuple(value.shape) if _core._is_plain_tensor(value) else getattr(value, "type_name", None)
            raise CheckFailed(
                f"my_mixer: op_inputs must return {name!r} of shape (B, T, H) = {(_BATCH, 64, _HEADS)}; got "
                f"{shape or type(value).__name__}"
            )
        if not bool(holds(value).all()):
            raise CheckFailed(
                f"my_mixer: op_inputs gave {name} from {value.min().item():.3g} to {value.max().item():.3g} on 64 "
                f"tokens of random input; the exercise asks for {name} {what} (pass the projection through "
                f"{squash})"
            )
    output = outcome_from(record.get("op_output"))
    _refuse_call("my_mixer", output)
    if not (_core._is_plain_tensor(output.result) and bool(torch.isfinite(output.result).all())):
        raise CheckFailed("my_mixer: your layer's output is not finite over 64 tokens of random input")


def _what_the_layer_computes(got: Any, probed: Any, norm: Any, point: Point) -> str:
    """The point one choice away, or the named layer, whose output the learner's ``mix`` reproduces, in words; else
    the first-order family it computes up to a change of step and gate (:func:`_named_up_to_steps`). Exact matches
    come first: a named layer's own op is named as itself, not as the family that holds it. ``got``: its output on
    :func:`_op_case` 1400, ``probed`` on :func:`_probe_case`; ``norm``: the layer's ``o_norm`` as data."""
    case = _op_case(point, 1400)
    if _core._is_plain_tensor(got):
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
                want = _framework_mix(other, norm, **case)
            except (ValueError, TypeError, CheckFailed):
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
        if got.shape == case["v"].shape and bool(torch.isfinite(got).all()):
            try:
                slip = _slip(got, point, case, 1, lambda p, c: _framework_mix(p, norm, **c), "layer")
            except (ValueError, TypeError, CheckFailed):
                slip = ""
            if slip:
                return slip
    weight = norm.get("weight") if isinstance(norm, dict) else None
    try:
        family = _named_up_to_steps(_probe_case(point), probed, weight if _core._is_plain_tensor(weight) else None)
    except Exception:  # any error: the failure already reported says what went wrong
        family = None
    if family is not None:
        return (
            f"\n  your mix computes {family} with a step size and a gate of its own at each token: a named layer up "
            "to a change of β and g, not your point"
        )
    return ""


_TODO = "fill in your mixer's methods, run its cell, then run this check again."
_NOT_ATTEMPTED = f"[not attempted yet] my_mixer: {_TODO}"


def _spec_problem(spec: Any) -> str | None:
    """What is wrong with the learner's spec as an object (read where the answer runs), or None."""
    from ttr_edu.layers import REGISTRY, Mixer, MixerSpec

    if not isinstance(spec, MixerSpec) or not (isinstance(spec.layer, type) and issubclass(spec.layer, Mixer)):
        return f"my_mixer: expected your MixerSpec(name, label, YourClass), got {type(spec).__name__}"
    if REGISTRY.get(spec.name) is not spec:
        return f"my_mixer: register your spec first: register({spec.name!r} spec, replace=True)"
    if spec.named_layer is not None:
        return (
            f"my_mixer: your spec says it is the named layer {spec.named_layer!r}; the capstone's point has no name "
            "(leave named_layer=None)"
        )
    return None


def _mixer_inputs(point: Point) -> list[dict]:
    """The causality and step-vs-forward sequences: ``B = 2`` sequences of 9 tokens of random input, at a window
    point over twice the window (:func:`_length`: a step that never drops the pair leaving the window agrees with the
    forward pass until the window is full). Both halves build them from the rebuilt point, so the answer's process
    runs the learner's layer on the sequences the grader judges."""
    T = _length(point, 9)
    return [
        {"x": torch.randn(_BATCH, T, _HIDDEN, generator=torch.Generator().manual_seed(s), dtype=torch.float64)}
        for s in (1500, 1501)
    ]


def _collect_mixer(arguments: tuple, guard: Callable) -> dict:
    """13.2, where the answer runs: the point as data; the spec's problems as an object; the layer's ``o_norm`` as
    data; and the outputs of every call the grader judges (the causality probe, ``mix`` on the op cases and the
    probe case, ``op_inputs`` and a forward pass on 64 tokens, step against forward), each an
    :class:`~ttr_edu.checks._rules.Outcome`. Nothing is judged here."""
    spec, point = arguments
    record: dict[str, Any] = {"point": _point_data(point)}
    try:
        point = _rebuilt(record["point"], "my_mixer")
    except CheckFailed:
        return record  # the grader says why
    from ttr_edu.layers import MixerSpec

    if not isinstance(spec, MixerSpec) and callable(spec):  # a function that builds the spec: run it first
        try:
            spec = spec()
        except NotImplementedError as err:
            stub = _is_untouched_stub(err)
            record["spec"] = "stub" if stub else f"my_mixer: building your spec raised NotImplementedError: {err}"
            return record
        except Exception as err:  # anything else the function raised: the learner's own bug
            record["spec"] = f"my_mixer: building your spec raised {type(err).__name__}: {err}"
            return record
    record["spec"] = _spec_problem(spec)
    if record["spec"] is not None:
        return record
    try:
        layer = _layer(spec)
    except NotImplementedError as err:
        record["spec"] = "stub" if _is_untouched_stub(err) else f"my_mixer: building your layer raised {err!r}"
        return record
    except Exception as err:
        record["spec"] = f"my_mixer: building your layer raised {type(err).__name__}: {err}"
        return record
    record["name"] = str(spec.name)
    record["norm"] = _norm_data(layer)

    def calls(name: str, fn: Callable, cases: list[dict]) -> list[Outcome]:
        declared = Exercise(name, _no_reference, list)
        return [answer_outcome(declared, fn, case, i, guard=guard) for i, case in enumerate(cases)]

    mix = _mixed(layer, point)
    record["causal"] = calls("my_mixer (causal)", _lookahead(layer, point), _mixer_inputs(point))
    record["op"] = calls("my_mixer (its op)", mix, [_op_case(point, 1400 + i) for i in range(3)])
    record["probe"] = calls("my_mixer (its op)", mix, [_probe_case(point)])[0]
    x = [{"x": _op_inputs_x()}]
    record["op_inputs"] = calls("my_mixer", _project(layer, point), x)[0]
    record["op_output"] = calls("my_mixer", _forward(layer), x)[0]
    record["step"] = calls("my_mixer (step == forward)", _step_outputs(layer), _mixer_inputs(point))
    return record


def _judged(name: str, record: dict, key: str, count: int) -> list[Outcome]:
    """The record's ``count`` outcomes under ``key``.

    Raises:
        CheckFailed: the record holds no such list.
    """
    found = record.get(key)
    if not isinstance(found, list) or len(found) != count:
        raise CheckFailed(f"{name}: the grader could not read back what your layer gave ({key})")
    return [outcome_from(x) for x in found]


def _zero_delta(name: str) -> Exercise:
    """A comparison with 0 (no change, no gap), as the two probes are judged."""
    return Exercise(name, lambda x: 0.0, list, rtol=0.0, atol=1e-9)


def _judge_mixer(record: dict, say: Callable[[str], None]) -> None:
    """13.2, in the grader: the point rebuilt and refused where a named layer occupies it; the spec; causality first;
    ``mix`` against the framework at the point (through the layer's ``o_norm``); ``op_inputs``' ranges; step against
    forward; and no named layer, even up to its own β and g."""
    point = _rebuilt(record.get("point"), "my_mixer")
    _refuse_occupied(point, "my_mixer")
    spec = record.get("spec")
    if spec == "stub":
        raise NotAttempted("my_mixer", _NOT_ATTEMPTED, _TODO)
    if spec is not None:
        raise CheckFailed(spec if isinstance(spec, str) else "my_mixer: the grader could not read back your spec")
    inputs = _mixer_inputs(point)
    causal = _zero_delta("my_mixer (causal)")
    try:  # first: a layer that looks ahead fails every later test too, and should hear why
        for index, outcome in enumerate(_judged("my_mixer (causal)", record, "causal", len(inputs))):
            if not (outcome.raised or outcome.broke_rule or outcome.not_attempted):
                outcome.result = _change(outcome.result)
                if outcome.result is None:  # not finite
                    _check_op_inputs(record, point)  # a raw gate or step says so
                    raise CheckFailed(
                        f"my_mixer (causal): your layer's output is not finite on {inputs[index]['x'].shape[1]} "
                        "tokens of random input"
                    )
            judge_case(causal, inputs[index], index, outcome)
        say(f"PASS my_mixer (causal): your function agrees with the reference on {len(inputs)} random cases.")
    except CheckFailed as failure:
        said = str(failure)  # an error, a blow-up, op_inputs' ranges or a forbidden call: not a look ahead
        refused = ("your function raised", "not finite", "op_inputs", "not count as an answer", "not given to this")
        if any(x in said for x in refused):
            raise
        raise CheckFailed(
            f"{failure}\n  your layer looks ahead: its output at t depends on tokens after t (the outputs before "
            "token 6 change when later tokens change). Use only tokens ≤ t in op_inputs and in mix"
        ) from None
    norm = record.get("norm")
    choices = point.objects()

    def reference(q, k, v, beta, g):  # the framework at the point, built here: a mix that calls it is not an answer
        return _framework_mix(point, norm, q, k, v, beta, g, regression=TestTimeRegression(*choices))

    cases = [_op_case(point, 1400 + i) for i in range(3)]
    ops = _judged("my_mixer (its op)", record, "op", len(cases))
    (probe,) = _judged("my_mixer (its op)", {"probe": [record.get("probe")]}, "probe", 1)
    declared = Exercise("my_mixer (its op)", reference, lambda: cases, rtol=1e-6, atol=1e-9)
    try:
        for index, (case, outcome) in enumerate(zip(cases, ops)):
            judge_case(declared, case, index, outcome)
        say(f"PASS my_mixer (its op): your function agrees with the reference on {len(cases)} random cases.")
    except CheckFailed as failure:
        raise CheckFailed(f"{failure}{_what_the_layer_computes(ops[0].result, probe.result, norm, point)}") from None
    _check_op_inputs(record, point)
    gap = _zero_delta("my_mixer (step == forward)")
    try:
        for index, outcome in enumerate(_judged("my_mixer (step == forward)", record, "step", len(inputs))):
            outcome.result = _step_gap(outcome.result)
            judge_case(gap, inputs[index], index, outcome)
        say(f"PASS my_mixer (step == forward): your function agrees with the reference on {len(inputs)} random cases.")
    except CheckFailed as failure:
        raise CheckFailed(
            f"{failure}\n  your layer's step() gives other outputs than its forward(): mix_step must take the same "
            "step as mix, one token at a time, starting from memory=None (what initial_state hands mix_step first)"
        ) from None
    ours = ops[0].result
    for name in NAMED_LAYERS:
        other = named_point(name)
        if other.function_class != "linear" or other.optimizer == "steps_per_token":
            continue  # a kernel cache, an MLP or several pairs per token: not this layer's inputs
        if relative_error(ours, _framework_mix(other, norm, **cases[0])) < 1e-6:
            raise CheckFailed(f"my_mixer: your layer computes {LAYER_LABELS[name]}, a named layer, on these inputs")
    weight = norm.get("weight") if isinstance(norm, dict) else None
    family = _named_up_to_steps(_probe_case(point), probe.result, weight if _core._is_plain_tensor(weight) else None)
    if family is not None:
        raise CheckFailed(
            f"my_mixer: your layer computes {family} with a step size and a gate of its own at each token: a named "
            "layer up to a change of β and g"
        )
    name = record.get("name") if isinstance(record.get("name"), str) else "your mixer"
    say(f"PASS my_mixer: {name} is {point.describe()}, distinct from every named layer.")


@staged(
    collect=_collect_mixer,
    judge=_judge_mixer,
    forbidden=_forbidden,
    given=_given_mixer(),
    harness=(_mixed, _lookahead, _project, _forward, _step_outputs),
)
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
    raise AssertionError("replaced by its declaration (_collect_mixer, _judge_mixer)")
