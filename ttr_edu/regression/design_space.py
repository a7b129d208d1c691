"""The design space of test-time regression as a catalogue: its choices, its points, their names and neighbours.

A layer is three choices (Wang, Shi, Fox 2025, §3): the regression weights, the function class and the optimiser.
This module lists the choices a learner can make on each axis, with the parameters each one takes
(:data:`CHOICES`, :data:`PARAMS`), and names the result: a :class:`Point` is one choice per axis plus its parameters,
:func:`identify` says which layer of :data:`~ttr_edu.regression.NAMED_LAYERS` it is (or which one it equals at these
parameters), and :func:`neighbours` lists the named layers one choice away. :func:`named_point` goes the other way,
from a name to its point. The explorer of chapter design_your_own_memory walks this catalogue; the update rule of a
point is composed in :mod:`.update_rule`, its cost in :mod:`.cost`.

Every point builds a :class:`~ttr_edu.regression.TestTimeRegression` (:meth:`Point.layer`), or says why it cannot
(:meth:`Point.problem`, the framework's own reason: a kernel smoother has no step to take, an MLP has no closed form).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .function_classes import MLP, KernelRidge, Linear, LocalConstant, LocalLinear
from .layer import NAMED_LAYERS, TestTimeRegression
from .optimizers import (
    ConjugateGradient,
    ExactSolve,
    GradientStep,
    ImplicitStep,
    MiniBatchGD,
    MomentumSGD,
    OnlineSGD,
    RecursiveLeastSquares,
    StepsPerToken,
)
from .weights import ExponentialDecay, Gates, SlidingWindow, Uniform

__all__ = [
    "AXES",
    "Param",
    "Choice",
    "PARAMS",
    "CHOICES",
    "LAYER_LABELS",
    "NAMED_PARAMS",
    "Point",
    "Identity",
    "Neighbour",
    "identify",
    "neighbours",
    "named_point",
]

#: the three axes of the space, in the order a point is written
AXES = ("weights", "function_class", "optimizer")


@dataclass(frozen=True)
class Param:
    """A parameter of a choice: its keyword, its symbol in a formula, the values the explorer offers, its default."""

    name: str
    symbol: str
    label: str
    values: tuple
    default: object


@dataclass(frozen=True)
class Choice:
    """One option on one axis: its key, its label, the parameters it takes, how it builds the framework's object,
    ``defaults`` that this choice sets for parameters of any axis (an MLP takes a smaller step than a linear
    memory; each kernel has the bandwidth that suits it), and ``drops``, parameters of other axes that do nothing
    with this choice (a kernel smoother inverts nothing, so the exact solve's λ does not enter it): a point with this
    choice neither stores, offers nor prints them."""

    axis: str
    key: str
    label: str
    params: tuple[str, ...]
    build: Callable[[Mapping[str, Any]], object]
    defaults: tuple[tuple[str, object], ...] = ()
    drops: tuple[str, ...] = ()


#: Every parameter of every choice, by keyword. Choices that share a keyword share its meaning (``beta`` is the step
#: size of every stepped optimiser, ``ridge`` the λ of every solve).
PARAMS: dict[str, Param] = {
    p.name: p
    for p in (
        Param("gamma", "γ", "decay per token", (0.8, 0.9, 0.95, 0.99), 0.95),
        Param("window", "w", "pairs in the window", (4, 8, 16, 32, 64), 32),
        Param("gate_rest", "α", "gate between switches", (1.0, 0.99, 0.95), 1.0),
        Param("gate_switch", "α*", "gate at the switch", (0.0, 0.01, 0.1, 0.5), 0.01),
        Param("kernel", "κ", "kernel", ("softmax", "gaussian"), "softmax"),
        Param("sharpness", "s", "kernel sharpness (1/bandwidth²)", (1.0, 4.0, 16.0, 64.0), 16.0),
        Param("lr", "η", "step size", (0.25, 0.5, 1.0), 1.0),
        Param("beta", "β", "step size", (0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 4.0, 16.0), 0.5),
        Param("steps", "k", "steps per token", (1, 2, 3, 4), 2),
        Param("mini_batch_size", "b", "mini-batch size", (1, 2, 4, 8, 16, 32), 8),
        Param("eta", "η", "momentum", (0.0, 0.5, 0.9), 0.5),
        Param("alpha", "α", "weight decay", (0.0, 0.01, 0.05, 0.2), 0.01),
        Param("cg_steps", "k", "CG iterations", (1, 2, 4, 8, 16), 2),
        Param("ridge", "λ", "ridge", (0.001, 0.01, 0.1, 1.0), 0.1),
    )
}


def _choices(*choices: Choice) -> dict[str, Choice]:
    return {choice.key: choice for choice in choices}


#: axis -> key -> :class:`Choice`: every option of the explorer, each building the framework's object.
CHOICES: dict[str, dict[str, Choice]] = {
    "weights": _choices(
        Choice("weights", "uniform", "uniform", (), lambda p: Uniform()),
        Choice("weights", "decay", "exponential decay", ("gamma",), lambda p: ExponentialDecay(p["gamma"])),
        Choice("weights", "window", "sliding window", ("window",), lambda p: SlidingWindow(p["window"])),
        Choice("weights", "gates", "data-dependent gates", ("gate_rest", "gate_switch"), lambda p: Gates()),
    ),
    "function_class": _choices(
        Choice("function_class", "linear", "linear", (), lambda p: Linear()),
        # an MLP's explicit steps diverge at the linear memory's β (the diagnostics' streams, beyond β ≈ 0.25)
        Choice("function_class", "mlp", "two-layer MLP", (), lambda p: MLP(), (("beta", 0.1),)),
        Choice(
            "function_class",
            "kernel_smoother",
            "kernel smoother",
            ("kernel", "sharpness"),
            lambda p: LocalConstant(p["kernel"]),
            drops=("ridge",),  # y_t = Σ w_ti v_i: no system to solve (named_layer("softmax_attention") refuses a ridge)
        ),
        Choice(
            "function_class",
            "local_linear",
            "local linear",
            ("kernel", "sharpness"),
            lambda p: LocalLinear(p["kernel"]),
            (("sharpness", 4.0),),
        ),
        Choice(
            "function_class",
            "kernel_ridge",
            "kernel ridge",
            ("sharpness",),
            lambda p: KernelRidge("gaussian"),
            (("sharpness", 1.0),),
        ),
    ),
    "optimizer": _choices(
        Choice("optimizer", "gradient_step", "one gradient step", ("lr",), lambda p: GradientStep(p["lr"])),
        Choice("optimizer", "online_sgd", "online SGD", ("beta",), lambda p: OnlineSGD()),
        Choice("optimizer", "implicit_step", "implicit step", ("beta",), lambda p: ImplicitStep()),
        Choice(
            "optimizer",
            "steps_per_token",
            "k steps per token",
            ("steps", "beta"),
            lambda p: StepsPerToken(num_householder=p["steps"]),
        ),
        Choice(
            "optimizer",
            "mini_batch_gd",
            "mini-batch GD",
            ("mini_batch_size", "beta"),
            lambda p: MiniBatchGD(mini_batch_size=p["mini_batch_size"]),
        ),
        Choice(
            "optimizer",
            "momentum",
            "momentum",
            ("eta", "alpha", "beta"),
            lambda p: MomentumSGD(eta=p["eta"], alpha=p["alpha"]),
        ),
        Choice(
            "optimizer",
            "conjugate_gradient",
            "conjugate gradient",
            ("cg_steps", "ridge"),
            lambda p: ConjugateGradient(steps=p["cg_steps"], ridge=p["ridge"]),
        ),
        Choice("optimizer", "exact_solve", "exact solve", ("ridge",), lambda p: _exact_solve(p)),
        Choice(
            "optimizer", "rls", "exact solve, recursive (RLS)", ("ridge",), lambda p: RecursiveLeastSquares(p["ridge"])
        ),
    ),
}


def _exact_solve(params: Mapping[str, Any]) -> ExactSolve:
    return ExactSolve(ridge=params["ridge"])


#: How the chapters write each named layer.
LAYER_LABELS: dict[str, str] = {
    "linear_attention": "linear attention",
    "gated_linear_attention": "gated linear attention",
    "deltanet": "DeltaNet",
    "gated_deltanet": "gated DeltaNet",
    "longhorn": "Longhorn",
    "deltaproduct": "DeltaProduct",
    "gated_deltaproduct": "gated DeltaProduct",
    "ttt_linear": "TTT-Linear",
    "ttt_mlp": "TTT-MLP",
    "titans": "Titans",
    "rls": "RLS",
    "mesa": "Mesa",
    "mesa_cg": "MesaNet (CG)",
    "softmax_attention": "softmax attention",
    "local_linear_attention": "local linear attention",
    "kernel_ridge": "kernel ridge regression",
}

#: The parameters a named layer fixes besides its three choices: softmax attention and local linear attention weigh
#: the pairs by the softmax kernel ``exp(s q·k)``. The Gaussian kernel makes a point of its own, equal to them only on
#: keys of one norm (:func:`identify` says so).
NAMED_PARAMS: dict[str, dict[str, object]] = {
    "softmax_attention": {"kernel": "softmax"},
    "local_linear_attention": {"kernel": "softmax"},
}

_KEY_OF_TYPE = {
    type(choice.build({name: PARAMS[name].default for name in choice.params})): (axis, key)
    for axis, choices in CHOICES.items()
    for key, choice in choices.items()
}


@dataclass(frozen=True)
class Point:
    """One point of the space: a choice per axis (keys of :data:`CHOICES`) and the parameters those choices take.

    Build one with :meth:`of`; a parameter none of the three choices takes is dropped, a missing one takes its
    default, so two points that build the same layer compare equal.
    """

    weights: str
    function_class: str
    optimizer: str
    params: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        for axis in AXES:
            key = getattr(self, axis)
            if key not in CHOICES[axis]:
                raise ValueError(f"{axis}: unknown choice {key!r}; valid choices are {', '.join(CHOICES[axis])}")
        for name, _ in self.params:
            if name not in PARAMS:
                raise ValueError(f"params: unknown parameter {name!r}; valid ones are {', '.join(PARAMS)}")

    @classmethod
    def of(cls, weights: str, function_class: str, optimizer: str, **params: Any) -> Point:
        """The point of these three choices; ``params`` by keyword (see :data:`PARAMS`).

        Raises:
            ValueError: an unknown choice or parameter (the message lists the valid ones).
        """
        for name in params:
            if name not in PARAMS:
                raise ValueError(f"{name}: unknown parameter; valid ones are {', '.join(PARAMS)}")
        probe = cls(weights, function_class, optimizer)
        values = {name: params.get(name, probe.default(name)) for name in probe.used()}
        return cls(weights, function_class, optimizer, tuple(sorted(values.items())))

    def used(self) -> tuple[str, ...]:
        """The parameters this point's three choices take, in axis order, less those one of them drops (the exact
        solve's λ at a kernel smoother)."""
        dropped = {name for axis in AXES for name in self.choice(axis).drops}
        return tuple(dict.fromkeys(name for axis in AXES for name in self.choice(axis).params if name not in dropped))

    def default(self, name: str) -> object:
        """The default of parameter ``name`` at this point: set by one of its choices (the class first), else the
        parameter's own."""
        for axis in ("function_class", "optimizer", "weights"):
            overrides = dict(self.choice(axis).defaults)
            if name in overrides:
                return overrides[name]
        return PARAMS[name].default

    def choice(self, axis: str) -> Choice:
        """The :class:`Choice` on ``axis``."""
        return CHOICES[axis][getattr(self, axis)]

    def param(self, name: str) -> Any:
        """The value of parameter ``name`` (its default when no choice of this point takes it)."""
        return dict(self.params).get(name, self.default(name))

    def replace(self, axis: str | None = None, key: str | None = None, **params: Any) -> Point:
        """This point with one axis set to ``key`` and/or some parameters changed.

        A new choice starts from its own defaults: the old choice's parameters are dropped, and so are the values
        the old choice set as defaults elsewhere (an MLP's small β) and every value still at this point's default,
        which takes the new point's default (DeltaNet's β = 0.5 becomes the MLP's β = 0.1). A value set by hand (one
        that differs from this point's default) keeps it, as does every parameter ``params`` sets.
        """
        choices = {a: getattr(self, a) for a in AXES}
        kept = {name: value for name, value in self.params if value != self.default(name)}  # the values set by hand
        if axis is not None:
            if axis not in AXES:
                raise ValueError(f"axis: expected one of {', '.join(AXES)}, got {axis!r}")
            old = self.choice(axis)
            for name in (*old.params, *dict(old.defaults)):
                kept.pop(name, None)
            choices[axis] = key
        return Point.of(choices["weights"], choices["function_class"], choices["optimizer"], **{**kept, **params})

    def objects(self) -> tuple[object, object, object]:
        """The framework's ``(weights, function_class, optimizer)`` objects of this point."""
        # every parameter of the three choices: one the point drops builds at its default and does nothing there
        params = {name: self.param(name) for axis in AXES for name in self.choice(axis).params}
        weights, function_class, optimizer = (self.choice(axis).build(params) for axis in AXES)
        return weights, function_class, optimizer

    def problem(self) -> str | None:
        """Why these choices make no layer (the framework's reason), or ``None`` when they do."""
        try:
            self.layer()
        except ValueError as error:
            return str(error)
        return None

    def layer(self) -> TestTimeRegression:
        """The point as a :class:`~ttr_edu.regression.TestTimeRegression`.

        Raises:
            ValueError: the choices do not combine (see :meth:`problem`).
        """
        return TestTimeRegression(*self.objects())

    def named(self) -> str | None:
        """The key of :data:`~ttr_edu.regression.NAMED_LAYERS` whose three choices this point makes (and whose
        :data:`NAMED_PARAMS` it has: softmax attention's kernel is softmax), or ``None``."""
        kinds = tuple(type(obj) for obj in self.objects())
        return next(
            (
                name
                for name, triple in NAMED_LAYERS.items()
                if triple == kinds and all(self.param(p) == v for p, v in NAMED_PARAMS.get(name, {}).items())
            ),
            None,
        )

    def describe(self) -> str:
        """``"uniform · linear · online SGD (β = 0.5)"``: the three choices and their parameters, in words."""
        parts = []
        for axis in AXES:
            choice = self.choice(axis)
            shown = ", ".join(f"{PARAMS[n].symbol} = {self.param(n)}" for n in choice.params if n in self.used())
            parts.append(f"{choice.label} ({shown})" if shown else choice.label)
        return " · ".join(parts)


@dataclass(frozen=True)
class Identity:
    """What a point is: the named layer it occupies (``name``, ``label``), or ``None``; ``equals``, the named layers
    it computes exactly at these parameters or on some inputs (each a sentence); ``same_as``, the named layer it
    computes exactly on every input (a special case of it: a constant gate, a step count of one), or ``None``; and
    ``up_to_steps``, the named first-order layer it computes on unit keys (as a mixer's keys are) with a step size and
    a gate of its own at each token, or ``None``.

    A point is occupied when ``same_as`` or ``up_to_steps`` is set: chapter design_your_own_memory's capstone refuses
    exactly those points, and its explorer says so (one rule, here, for both)."""

    name: str | None
    label: str | None
    equals: tuple[str, ...]
    same_as: str | None = None
    up_to_steps: str | None = None

    @property
    def occupied(self) -> str | None:
        """The named layer that occupies the point (exactly, or up to a change of β and g), or ``None``."""
        return self.same_as or self.up_to_steps

    def sentence(self) -> str:
        """``"This is DeltaNet."``, ``"Occupied by ...: the capstone refuses it."`` or ``"No named layer sits
        here."``, with what it equals."""
        if self.name:
            head = f"This is {self.label}."
        elif self.same_as:
            head = f"Occupied by {_label(self.same_as)} (the capstone refuses it):"
        elif self.up_to_steps:
            head = f"Occupied, up to a change of β and g, by {_label(self.up_to_steps)} (the capstone refuses it):"
        else:
            head = "No named layer sits here."
        return " ".join([head, *self.equals])


def _named(weights: str, function_class: str, optimizer: str) -> str | None:
    return Point.of(weights, function_class, optimizer).named()


def _label(name: str) -> str:
    return LAYER_LABELS[name]


def identify(point: Point) -> Identity:
    """Which named layer ``point`` is, and which named layers it equals at its parameters.

    The equalities are exact identities of the framework (the tests prove each on random inputs):

    * exponential decay γ is the gated layer with the constant gate ``g = log γ``;
    * a window of ``w`` pairs is the uniform layer on sequences of at most ``w`` tokens;
    * one step per token, a mini-batch of one, and momentum and weight decay of zero are online SGD;
    * the linear exact solve with uniform weights is RLS (the same answer, computed in closed form), and conjugate
      gradients with uniform weights are MesaNet's CG with gates of one;
    * with unit keys the implicit step is online SGD at the step ``β / (1 + β)``;
    * on keys of one norm the Gaussian kernel weighs the pairs as the softmax kernel does (a Gaussian kernel smoother
      is softmax attention there, and local linear with it local linear attention):
      ``exp(−s‖q − k‖²/2) = exp(s q·k) · exp(−s‖q‖²/2) · exp(−s‖k‖²/2)``, and the last two factors are the same for
      every pair, so they cancel when the weights are normalised.

    ``up_to_steps`` names the first-order layer (DeltaNet, gated DeltaNet) a linear point computes on unit keys with
    a step size and a gate of its own at each token: the implicit step with uniform, decaying or gated weights, and
    momentum with ``η = 0 < α`` (online SGD with a weight decay).

    Raises:
        TypeError: ``point`` is not a :class:`Point`.
    """
    if not isinstance(point, Point):
        raise TypeError(f"point: expected a design_space.Point, got {type(point).__name__}")
    name = point.named()
    equals, same_as, up_to_steps = [], name, None
    w, f, o = point.weights, point.function_class, point.optimizer
    if point.problem() is None:
        if w == "decay" and (gated := _named("gates", f, o)):
            equals.append(f"It is {_label(gated)} with the constant gate g = log γ.")
            same_as = same_as or gated
        if w == "window" and (uniform := _named("uniform", f, o)):
            equals.append(f"On sequences of at most w = {point.param('window')} tokens it is {_label(uniform)}.")
        reduces = (
            (o == "steps_per_token" and point.param("steps") == 1, "with one step per token"),
            (o == "mini_batch_gd" and point.param("mini_batch_size") == 1, "with a mini-batch of one"),
            (o == "momentum" and point.param("eta") == 0 and point.param("alpha") == 0, "with η = α = 0"),
        )
        for holds, why in reduces:
            if holds and (sgd := _named(w, f, "online_sgd")):
                equals.append(f"{why[0].upper()}{why[1:]} it is {_label(sgd)}.")
                same_as = same_as or sgd
        if o == "exact_solve" and w == "uniform" and f == "linear":
            equals.append("It computes RLS's answer in closed form (RLS updates it recursively).")
            same_as = same_as or "rls"
        if o == "conjugate_gradient" and w == "uniform" and f == "linear":
            equals.append("It is MesaNet (CG) with gates of one.")
            same_as = same_as or "mesa_cg"
        if o == "implicit_step" and (sgd := _named(w, f, "online_sgd")):
            equals.append(f"With unit keys it is {_label(sgd)} at the step β/(1 + β).")
        if "kernel" in point.used() and point.param("kernel") == "gaussian":
            softmax = point.replace(kernel="softmax")
            named = softmax.named()
            other = _label(named) if named else "this point with κ = softmax"
            equals.append(
                f"On keys of one norm (the explorer's keys are unit vectors) it computes {other} exactly: "
                "exp(−s‖q − k‖²/2) = exp(s q·k)·exp(−s‖q‖²/2)·exp(−s‖k‖²/2), and the last two factors are the same "
                "for every pair, so they cancel when the weights are normalised."
            )
        if f == "linear" and o == "implicit_step" and w in ("uniform", "decay", "gates"):
            if w == "decay":
                equals.append(
                    f"With unit keys it is {_label('gated_deltanet')} at the step β/(1 + β), with the constant gate "
                    "g = log γ."
                )
            up_to_steps = "deltanet" if w == "uniform" else "gated_deltanet"
        if f == "linear" and o == "momentum" and point.param("eta") == 0 and point.param("alpha") > 0:
            equals.append(
                f"With η = 0 it is online SGD with the weight decay α: {_label('gated_deltanet')} with a step size "
                "and a gate of its own at each token."
            )
            up_to_steps = "gated_deltanet"
    return Identity(name, _label(name) if name else None, tuple(equals), same_as, up_to_steps)


@dataclass(frozen=True)
class Neighbour:
    """A named layer one choice away: change ``axis`` to ``key`` (that choice's default parameters)."""

    axis: str
    key: str
    name: str

    @property
    def label(self) -> str:
        return _label(self.name)


def neighbours(point: Point) -> list[Neighbour]:
    """The named layers that differ from ``point`` in exactly one choice, axis by axis in :data:`AXES` order.

    Raises:
        TypeError: ``point`` is not a :class:`Point`.
    """
    if not isinstance(point, Point):
        raise TypeError(f"point: expected a design_space.Point, got {type(point).__name__}")
    found = []
    for axis in AXES:
        for key in CHOICES[axis]:
            if key == getattr(point, axis):
                continue
            name = point.replace(axis, key).named()
            if name is not None:
                found.append(Neighbour(axis, key, name))
    return found


def named_point(name: str, **params: Any) -> Point:
    """The point of the named layer ``name`` (a key of :data:`~ttr_edu.regression.NAMED_LAYERS`), default parameters
    unless given.

    Raises:
        ValueError: an unknown name (the message lists the valid ones), or a parameter the layer fixes given another
            value (:data:`NAMED_PARAMS`: softmax attention's kernel is softmax).
    """
    if name not in NAMED_LAYERS:
        raise ValueError(f"name: unknown layer {name!r}; valid names are {', '.join(NAMED_LAYERS)}")
    for param, value in NAMED_PARAMS.get(name, {}).items():
        if param in params and params[param] != value:
            raise ValueError(f"{param}: {name} has {param} = {value!r}, got {params[param]!r}")
    keys = dict(_KEY_OF_TYPE[kind] for kind in NAMED_LAYERS[name])
    return Point.of(keys["weights"], keys["function_class"], keys["optimizer"], **params)
