"""Checks for chapter 13, design your own memory: the capstone, a point of the design space no named layer occupies.

* ``check_my_step(my_step, initial_state, point)``: the learner's recurrent update of one head, token by token,
  against the regression framework at the learner's own point (:class:`ttr_edu.regression.design_space.Point`): the
  objective the update must come from. A point a named layer occupies (or computes on every input: a constant
  gate, one step per token) is refused; a wrong update is reported with the point it computes instead, when it is
  one (an update that ignores the weights computes the same point with uniform weights).

One head, one token: ``q, k`` are ``(D_k,)``, ``v`` ``(D_v,)``; ``beta`` and ``g`` are 0-dimensional tensors, ``g`` the
log of the factor by which the point's weights shrink the past at this token (``log α_t`` for gates, ``log γ`` for an
exponential decay, 0 otherwise; a window's weights are not a factor: the step keeps what it needs). Every tensor is
float64; keys are not unit vectors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ttr_edu.checks._core import CheckFailed, relative_error, run_check
from ttr_edu.regression import TestTimeRegression
from ttr_edu.regression.design_space import AXES, CHOICES, LAYER_LABELS, Point, identify

__all__ = ["check_my_step", "point_outputs", "STEPPED", "SUGGESTED"]

#: the optimisers that take the per-token step size ``beta``
STEPPED = ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum")


def _refuse_occupied(point) -> None:
    """The capstone's rules about the point itself, before any answer is run."""
    if not isinstance(point, Point):
        raise CheckFailed(
            f"my_step: expected your point as a design_space.Point (Point.of(...)), got {type(point).__name__}"
        )
    problem = point.problem()
    if problem is not None:
        raise CheckFailed(f"my_step: your point {point.describe()} makes no layer: {problem}")
    if point.function_class != "linear":
        raise CheckFailed(
            f"my_step: the capstone takes a linear memory (a state S of D_k × D_v and what your rule carries "
            f"with it); your point has the class {point.choice('function_class').label!r}"
        )
    identity = identify(point)
    if identity.same_as is not None:
        how = f"it is {LAYER_LABELS[identity.same_as]}" if identity.name else " ".join(identity.equals)
        raise CheckFailed(
            f"my_step: {point.describe()} is a named layer's point ({how}); pick one that no named layer occupies"
        )


def _case(point: Point, seed: int, d_k: int, d_v: int) -> dict:
    """One sequence for one head: inputs ``(T, D)``, longer than a window so that the window binds."""
    gen = torch.Generator().manual_seed(seed)
    T = 12 if point.weights != "window" else point.param("window") + 8
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
            o, state = my_step(state, q[t], k[t], v[t], beta[t], g[t])
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
    except Exception:  # noqa: BLE001 - the failure already reported says what went wrong
        return ""
    if not isinstance(got, torch.Tensor) or not torch.isfinite(got).all():
        return ""
    candidates = []
    for axis in AXES:
        for key in CHOICES[axis]:
            other = point.replace(axis, key)
            if key != getattr(point, axis) and other.function_class == "linear" and other.problem() is None:
                candidates.append((axis, other))
    hints = {
        "weights": "your update ignores or mistakes the weights",
        "optimizer": "your update takes another optimiser's step",
    }
    for axis, other in candidates:
        if relative_error(got, point_outputs(other, **case)) < 1e-6:
            named = identify(other).name
            name = f" ({LAYER_LABELS[named]})" if named else ""
            choices = " · ".join(other.choice(a).label for a in AXES)
            return f"\n  your outputs are those of {choices}{name}: {hints.get(axis, '')}"
    return ""


#: The chapter's suggested point: gated weights, a linear memory, the implicit step (no named layer sits there).
SUGGESTED = Point.of("gates", "linear", "implicit_step")


def _zero_state(d_k: int, d_v: int) -> torch.Tensor:
    return torch.zeros(d_k, d_v, dtype=torch.float64)


def check_my_step(my_step: Callable, initial_state: Callable = _zero_state, point: Point = SUGGESTED) -> bool:
    """Check ``my_step(state, q, k, v, beta, g) -> (o, state)`` from ``initial_state(d_k, d_v)`` at ``point``
    (defaults: a zero ``D_k × D_v`` state, the chapter's suggested point :data:`SUGGESTED`).

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
