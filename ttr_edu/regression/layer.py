"""The layer: :class:`TestTimeRegression` takes the three choices; :data:`NAMED_LAYERS` places the field's layers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ttr_edu._internal.contract import STATE, check_nonempty, check_nonnegative, check_state
from ttr_edu._internal.deprecation import rename_keywords
from ttr_edu._internal.mlp_memory import check_mlp_state
from ttr_edu._internal.validation import (
    Dims,
    check_positive_float,
    check_same_device,
    check_tensor,
    guarded,
)

from .deep import mini_batch_gd, momentum_sgd
from .function_classes import FUNCTION_CLASSES, MLP, KernelRidge, Linear, LocalConstant, LocalLinear
from .linear import LINEAR_SOLVERS
from .local import LOCAL_SOLVERS
from .optimizers import (
    OPTIMIZERS,
    ConjugateGradient,
    ExactSolve,
    GradientStep,
    ImplicitStep,
    MiniBatchGD,
    MomentumSGD,
    MultiPassSGD,
    OnlineSGD,
    RecursiveLeastSquares,
    StepsPerToken,
)
from .weights import WEIGHTS, Gates, SlidingWindow, Uniform
from .window import windowed

__all__ = [
    "TestTimeRegression",
    "NAMED_LAYERS",
    "named_layer",
    "STEPPED",
    "WARM_STARTED",
    "SOLVERS",
]

#: optimisers that take the call's step sizes ``beta``
STEPPED = (OnlineSGD, MultiPassSGD, ImplicitStep, StepsPerToken, MiniBatchGD, MomentumSGD)
#: optimisers that start from the call's ``initial_state``
WARM_STARTED = (GradientStep, OnlineSGD, MultiPassSGD, ImplicitStep, StepsPerToken, MiniBatchGD, MomentumSGD)

# --------------------------------------------------------------------------------------------------------------
# The framework.
# --------------------------------------------------------------------------------------------------------------


class TestTimeRegression:
    """A sequence layer given by its three design choices (Wang, Shi, Fox 2025).

    Args:
        weights: :class:`Uniform`, :class:`ExponentialDecay`, :class:`Gates` or :class:`SlidingWindow` (evaluated
            window by window: every choice that takes uniform weights takes a window too).
        function_class: :class:`Linear`, :class:`MLP` (parametric), :class:`LocalConstant`, :class:`LocalLinear`
            or :class:`KernelRidge` (nonparametric).
        optimizer: :class:`ExactSolve`, :class:`RecursiveLeastSquares`, :class:`ConjugateGradient`,
            :class:`GradientStep`, :class:`OnlineSGD`, :class:`ImplicitStep`, :class:`StepsPerToken`,
            :class:`MiniBatchGD`, :class:`MomentumSGD` or :class:`MultiPassSGD`.

    Raises:
        TypeError: a choice of the wrong kind (the message lists the valid ones).
        ValueError: an invalid combination, with the reason: a local (nonparametric) class is refitted at every
            query and has only its closed form, so it needs :class:`ExactSolve`; an inverse needs ``ridge > 0``.

    Example::

        deltanet = TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=OnlineSGD())
        o, S = deltanet(q, k, v, beta=beta, output_final_state=True)
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, weights: Any, function_class: Any, optimizer: Any) -> None:
        for name, value, kinds in (
            ("weights", weights, WEIGHTS),
            ("function_class", function_class, FUNCTION_CLASSES),
            ("optimizer", optimizer, OPTIMIZERS),
        ):
            if not isinstance(value, kinds):
                valid = ", ".join(f"{kind.__name__}()" for kind in kinds)
                raise TypeError(f"{name}: expected one of {valid}, got {value!r}")
        local = isinstance(function_class, (LocalConstant, LocalLinear, KernelRidge))
        if local and not isinstance(optimizer, ExactSolve):
            raise ValueError(
                f"optimizer: {type(function_class).__name__} is a local (nonparametric) fit redone at every query "
                f"from all stored pairs; it has no parameter carried from step to step for "
                f"{type(optimizer).__name__} to update, only its closed form: use optimizer=ExactSolve()"
            )
        deep_ok = (OnlineSGD, MiniBatchGD, MomentumSGD)
        if isinstance(function_class, MLP) and not isinstance(optimizer, deep_ok):
            raise ValueError(
                f"optimizer: the MLP memory has no closed form and no rank-one recursion; fit it with a gradient "
                f"method (OnlineSGD, MiniBatchGD or MomentumSGD), got {type(optimizer).__name__}"
            )
        if isinstance(optimizer, (MiniBatchGD, MomentumSGD)) and not isinstance(weights, (Uniform, SlidingWindow)):
            raise ValueError(
                f"weights: {type(optimizer).__name__} is written for uniform weights (MomentumSGD forgets through its "
                f"own weight decay alpha) or a SlidingWindow; got {type(weights).__name__}()"
            )
        if isinstance(function_class, MLP) and not isinstance(weights, (Uniform, SlidingWindow)):
            raise ValueError(
                f"weights: the MLP memory is written for Uniform() weights (or a SlidingWindow), got "
                f"{type(weights).__name__}()"
            )
        needs_inverse = isinstance(function_class, (Linear, LocalLinear, KernelRidge)) and isinstance(
            optimizer, ExactSolve
        )
        if needs_inverse and optimizer.ridge <= 0:
            raise ValueError(
                f"optimizer: ExactSolve(ridge={optimizer.ridge}) with {type(function_class).__name__} inverts the key "
                "covariance, which is singular while fewer than D_k keys are seen; use a ridge > 0 (e.g. 1e-3)"
            )
        if (type(function_class), type(optimizer)) not in SOLVERS:
            raise ValueError(
                f"optimizer: {type(optimizer).__name__} has no way to fit {type(function_class).__name__} here"
            )
        self.weights, self.function_class, self.optimizer = weights, function_class, optimizer

    def __repr__(self) -> str:
        return (
            f"TestTimeRegression(weights={self.weights!r}, function_class={self.function_class!r}, "
            f"optimizer={self.optimizer!r})"
        )

    @guarded
    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        beta: torch.Tensor | None = None,
        g: torch.Tensor | None = None,
        scale: float | None = None,
        initial_state: torch.Tensor | None = None,
        output_final_state: bool = False,
        eta: torch.Tensor | None = None,
        alpha: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Memorise ``(k_i, v_i)`` and retrieve ``y_t = m_t(q_t)`` for every ``t`` (causal).

        Args:
            q, k: ``(B, T, H, D_k)`` floating tensors; v: ``(B, T, H, D_v)``, the same dtype and device.
            beta: ``(B, T, H)`` step sizes, required by the stepped optimisers (:class:`OnlineSGD`,
                :class:`MultiPassSGD`, :class:`ImplicitStep`, :class:`StepsPerToken` with ``T·num_householder`` rows,
                :class:`MiniBatchGD`, :class:`MomentumSGD`) only.
            g: ``(B, T, H)`` log decays ``≤ 0``, required by :class:`Gates` only.
            scale: the query scale (``D_k ** -0.5`` by default). Linear class: ``y = m(scale · q)``;
                local classes: the kernel's inverse squared bandwidth, ``κ = exp(scale · q·k)``.
            initial_state: ``(B, H, D_k, D_v)``, a starting ``S`` for the warm-started optimisers (it decays with
                the weights); for :class:`MLP` the required weights ``(W1, W2)``.
            output_final_state: also return ``S_T`` (``(W1, W2)`` for :class:`MLP`; parametric classes only).
            eta, alpha: ``(B, T, H)`` momentum and weight decay per token, :class:`MomentumSGD` only.

        Returns:
            ``(o, S_T)`` with ``o`` ``(B, T, H, D_v)`` in the dtype of ``q`` and ``S_T`` ``(B, H, D_k, D_v)`` in the
            compute dtype (fp32, or fp64 for fp64 inputs), or ``(o, None)``.

        Raises:
            TypeError: non-tensors, integer dtypes, ``k``/``v`` of another dtype than ``q``, or :class:`MLP`
                weights ``(W1, W2)`` in another dtype than q's or the compute dtype.
            ValueError: shapes that disagree (the message names the argument and the dims), T = 0, tensors on
                different devices, a missing or superfluous ``beta``/``g``, or a state the chosen class does not keep;
                NaN/inf in any tensor (``initial_state`` included), a ``scale`` that does not fit the compute dtype,
                or an output that overflows it (named ``o``): the input policy of ``ttr_edu._internal.validation``.
        """
        dims = Dims()
        dims.bind("q", q, ("B", "T", "H", "D_k"))
        empty = [name for name in ("B", "T", "H", "D_k") if dims[name] == 0]
        if empty:  # an empty batch or head has nothing to memorise; T = 0 has no token to answer
            raise ValueError(f"q: expected {', '.join(empty)} >= 1, got shape {tuple(q.shape)}")
        pairs = "T"  # the rows of k, v and beta: T, or T·num_householder for StepsPerToken (DeltaProduct)
        if isinstance(self.optimizer, StepsPerToken):
            pairs = "T·num_householder"
            dims.sizes[pairs] = dims["T"] * self.optimizer.num_householder
            dims.owner[pairs] = "q and optimizer.num_householder"
        dims.bind("k", k, ("B", pairs, "H", "D_k"))
        dims.bind("v", v, ("B", pairs, "H", "D_v"))
        for name, x in (("k", k), ("v", v)):
            if x.dtype != q.dtype:
                raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {x.dtype}")
        if dims["D_v"] == 0:
            raise ValueError(f"v: expected D_v >= 1, got shape {tuple(v.shape)}")
        mlp = isinstance(self.function_class, MLP)
        for name, value in (("beta", beta), ("g", g), ("eta", eta), ("alpha", alpha)):
            check_tensor(name, value, allow_none=True)
        # NaN/inf in every tensor (initial_state included; g by the weights), a non-bool output_final_state, a scale
        # that overflows the compute dtype and an overflowing o: refused by @guarded, the ops' input policy
        if not mlp:
            check_tensor("initial_state", initial_state, allow_none=True)
        check_same_device(q=q, k=k, v=v, beta=beta, g=g, eta=eta, alpha=alpha)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        scale = dims["D_k"] ** -0.5 if scale is None else check_positive_float("scale", scale)

        params = self._check_what_the_choices_take(dims, pairs, q, beta, eta, alpha, initial_state, output_final_state)

        if isinstance(self.weights, SlidingWindow):  # no per-token decay: the uniform layer over each window
            if g is not None:
                raise ValueError("g: weights=SlidingWindow(window) takes no g; use weights=Gates() for gates")
            return windowed(
                TestTimeRegression(Uniform(), self.function_class, self.optimizer),
                self.weights.window,
                q,
                k,
                v,
                rows=dims[pairs] // dims["T"],
                per_token={name: x for name, x in (("eta", eta), ("alpha", alpha)) if x is not None},
                per_pair={} if beta is None else {"beta": beta},
                scale=scale,
                initial_state=initial_state,
                output_final_state=output_final_state,
            )
        g = self.weights.log_decay(g, dims, dtype, q.device)
        if g is not None and isinstance(self.optimizer, RecursiveLeastSquares) and bool(torch.isneginf(g).any()):
            raise ValueError(
                "g: RecursiveLeastSquares decays its ridge with the data (forgetting-factor RLS), so a reset "
                "g = -inf would leave the covariance singular; use ExactSolve or ConjugateGradient (a constant "
                "ridge: Mesa, named_layer('mesa')), or split the sequence"
            )
        out_dtype = q.dtype
        q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, D): time next to features
        g = None if g is None else g.transpose(1, 2)  # (B, H, T)
        beta = None if beta is None else beta.to(dtype).transpose(1, 2)
        S0 = None if initial_state is None or mlp else initial_state.to(dtype)

        prepared = _Prepared(q, k, v, g, beta, S0, scale, eta, alpha, params, dims, dtype)
        o, S = SOLVERS[type(self.function_class), type(self.optimizer)](self, prepared)
        o = o.transpose(1, 2).to(out_dtype)
        return o, (S if output_final_state else None)

    def _check_what_the_choices_take(
        self,
        dims: Dims,
        pairs: str,
        q: torch.Tensor,
        beta: torch.Tensor | None,
        eta: torch.Tensor | None,
        alpha: torch.Tensor | None,
        initial_state: Any,
        output_final_state: bool,
    ) -> tuple[torch.Tensor, ...] | None:
        """Refuse, naming the argument, what the three choices do not take (``beta`` without a stepped optimiser,
        ``eta``/``alpha`` without momentum, a final state of the key-value cache, a warm start that the optimiser
        cannot use) or lack; return the MLP's starting weights (``None`` for the other classes)."""
        stepped = isinstance(self.optimizer, STEPPED)
        if stepped and beta is None:
            raise ValueError(f"beta: optimizer={type(self.optimizer).__name__}() needs step sizes beta, (B, T, H)")
        if not stepped and beta is not None:
            raise ValueError(f"beta: optimizer={type(self.optimizer).__name__}() takes no step sizes beta")
        if beta is not None:
            dims.bind("beta", beta, ("B", pairs, "H"))
        for name, x in (("eta", eta), ("alpha", alpha)):
            if x is None:
                continue
            if not isinstance(self.optimizer, MomentumSGD):
                raise ValueError(f"{name}: only optimizer=MomentumSGD() takes a per-token {name}")
            dims.bind(name, x, ("B", "T", "H"))
            check_nonnegative(name, x, "a momentum" if name == "eta" else "a weight decay", high=1.0)
        parametric = isinstance(self.function_class, (Linear, MLP))
        if not parametric and output_final_state:
            raise ValueError(
                f"output_final_state: {type(self.function_class).__name__} keeps every pair (its state is the "
                "key-value cache), not a fixed-size S"
            )
        if isinstance(self.function_class, MLP):
            if initial_state is None:
                raise ValueError(
                    "initial_state: the MLP memory needs its starting weights (W1, W2), shapes (B, H, D_k, D_h) and "
                    "(B, H, D_h, D_v): at W1 = W2 = 0 every gradient is zero"
                )
            if self.function_class.residual and dims["D_k"] != dims["D_v"]:
                raise ValueError(
                    f"function_class: MLP(residual=True) needs D_k == D_v, got {dims['D_k']}, {dims['D_v']}"
                )
            return check_mlp_state("initial_state", initial_state, dims, q)
        elif initial_state is not None:
            if not isinstance(self.optimizer, WARM_STARTED):
                raise ValueError(
                    f"initial_state: {type(self.optimizer).__name__} solves from the pairs alone (RLS would also "
                    "need the inverse covariance P); pass the earlier pairs instead"
                )
            check_state("initial_state", initial_state, dims, STATE, q.device)
        return None

    @guarded
    def predict(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        queries: torch.Tensor,
        *,
        beta: torch.Tensor | None = None,
        g: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """Memorise all ``N`` pairs of one sequence, then answer each query from ``m_N`` without writing it.

        ``y_j = m_N(q_j)``: the regression fitted to every pair, evaluated at the queries (a causal layer answers a
        query only after it has written that position's pair; here the queries write nothing).

        Args:
            k: ``(N, D_k)``; v: ``(N, D_v)``; queries: ``(M, D_k)``; beta, g: ``(N,)`` where the choices need them.
            scale: as in :meth:`__call__`.
        Returns:
            ``(M, D_v)`` in the dtype of ``queries``.
        Raises:
            TypeError / ValueError: as :meth:`__call__`, naming the argument and the dims.
        """
        dims = Dims()
        dims.bind("k", k, ("N", "D_k"))
        dims.bind("v", v, ("N", "D_v"))
        dims.bind("queries", queries, ("M", "D_k"))
        for name, x in (("beta", beta), ("g", g)):
            check_tensor(name, x, allow_none=True)
            if x is not None:
                dims.bind(name, x, ("N",))
        check_same_device(k=k, v=v, queries=queries, beta=beta, g=g)
        check_nonempty(dims, k=("N", "D_k"), v=("D_v",), queries=("M",))
        for name, x in (("v", v), ("queries", queries)):
            if x.dtype != k.dtype:
                raise TypeError(f"{name}: expected the dtype of k ({k.dtype}), got {x.dtype}")
        M, N = dims["M"], dims["N"]
        if isinstance(self.function_class, Linear):  # a parametric memory: fit once, read S_N at every query
            kw = {name: x[None, :, None] for name, x in (("beta", beta), ("g", g)) if x is not None}
            try:  # the keys are the layer's queries here: an error about q is about k
                _, S = self(
                    k[None, :, None], k[None, :, None], v[None, :, None], scale=1.0, output_final_state=True, **kw
                )
            except ValueError as error:
                raise _renamed_q(error, "k") from None
            scale = dims["D_k"] ** -0.5 if scale is None else check_positive_float("scale", scale)
            return (scale * queries.to(S.dtype) @ S[0, 0]).to(queries.dtype)
        # Each query gets its own copy of the sequence and is asked at the last position, which sees all N pairs.
        per_token = {}
        for name, x in (("beta", beta), ("g", g)):
            if x is not None:
                per_token[name] = x[None, :, None].expand(M, N, 1)
        q = queries[:, None, None, :].expand(M, N, 1, dims["D_k"])
        try:
            o, _ = self(
                q, k[None, :, None].expand(M, N, 1, -1), v[None, :, None].expand(M, N, 1, -1), scale=scale, **per_token
            )
        except ValueError as error:  # the layer's q is made of the queries: name what the caller passed
            raise _renamed_q(error, "queries") from None
        return o[:, -1, 0]


def _renamed_q(error: ValueError, name: str) -> ValueError:
    """``error`` from the inner call of :meth:`TestTimeRegression.predict`, naming ``name`` where it named ``q``."""
    message = str(error)
    return ValueError(f"{name}:{message[2:]}" if message.startswith("q:") else message)


class _Prepared(NamedTuple):
    """A call's checked inputs, heads-first in the compute dtype: ``q, k`` ``(B, H, T, D_k)`` (``q`` unscaled),
    ``v`` ``(B, H, T, D_v)``, ``g`` and ``beta`` ``(B, H, T)`` or ``None``, ``S0`` the linear class's warm start,
    ``eta, alpha`` as the caller passed them, ``params`` the MLP's starting weights."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor | None
    beta: torch.Tensor | None
    S0: torch.Tensor | None
    scale: float
    eta: torch.Tensor | None
    alpha: torch.Tensor | None
    params: tuple[torch.Tensor, ...] | None
    dims: Dims
    dtype: torch.dtype


def _local(layer: TestTimeRegression, c: _Prepared) -> tuple[torch.Tensor, None]:
    """A local class, refitted at every query: its closed form (:data:`ttr_edu.regression.local.LOCAL_SOLVERS`)."""
    solve = LOCAL_SOLVERS[type(layer.function_class)]
    return solve(layer.function_class, layer.optimizer, c.q, c.k, c.v, c.g, c.scale), None


def _linear(layer: TestTimeRegression, c: _Prepared) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear class under its optimiser (:data:`ttr_edu.regression.linear.LINEAR_SOLVERS`)."""
    solve: Callable[..., tuple[torch.Tensor, torch.Tensor]] = LINEAR_SOLVERS[type(layer.optimizer)]
    return solve(layer.optimizer, c.scale * c.q, c.k, c.v, c.g, c.beta, c.S0)


def _gradient_method(layer: TestTimeRegression, c: _Prepared) -> tuple[torch.Tensor, object]:
    """The MLP memory under a gradient method, or momentum on the linear class (:mod:`ttr_edu.regression.deep`)."""
    opt, fc = layer.optimizer, layer.function_class
    if c.params is not None:
        start = tuple(W.to(c.dtype) for W in c.params)
    else:
        d = c.dims
        start = (c.q.new_zeros(d["B"], d["H"], d["D_k"], d["D_v"]) if c.S0 is None else c.S0,)
    if isinstance(opt, MomentumSGD):
        gates = [None if x is None else x.to(c.dtype).transpose(1, 2) for x in (c.eta, c.alpha)]
        o, S = momentum_sgd(opt, fc, start, c.scale * c.q, c.k, c.v, c.beta, *gates)
    else:
        o, S = mini_batch_gd(opt, fc, start, c.scale * c.q, c.k, c.v, c.beta)
    return o, (S if c.params is not None else S[0])


#: (function class, optimiser) -> how the layer computes: every combination :class:`TestTimeRegression` accepts has
#: one entry, and a combination without one is refused when the layer is built.
SOLVERS: dict[tuple[type, type], Callable[[TestTimeRegression, _Prepared], tuple[torch.Tensor, object]]] = {
    **{(function_class, ExactSolve): _local for function_class in LOCAL_SOLVERS},
    **{(Linear, optimizer): _linear for optimizer in LINEAR_SOLVERS},
    **{(MLP, optimizer): _gradient_method for optimizer in (OnlineSGD, MiniBatchGD, MomentumSGD)},
    (Linear, MomentumSGD): _gradient_method,
}


# --------------------------------------------------------------------------------------------------------------
# The named layers of the field.
# --------------------------------------------------------------------------------------------------------------

#: The field's layers placed by their three choices. In this project "rls" is the ungated exact ridge regression
#: (Sherman–Morrison here; ExactSolve gives the same answer) and "mesa" the gated exact ridge regression with a
#: CONSTANT ridge, ``S_t = (Σ γ k kᵀ + λI)⁻¹ Σ γ k vᵀ`` (MesaNet, von Oswald et al. 2025 eq. 6; fla's Mesa layer;
#: equal to ``ops.rls_recurrent(g=…)``), and "mesa_cg" MesaNet's own solver: conjugate gradients towards that solve.
#: ``Gates × Linear × RecursiveLeastSquares`` is NOT Mesa: it is classical forgetting-factor RLS, whose ridge fades
#: with the data (see :class:`RecursiveLeastSquares`); it has no name here.
NAMED_LAYERS: dict[str, tuple] = {
    "linear_attention": (Uniform, Linear, GradientStep),
    "gated_linear_attention": (Gates, Linear, GradientStep),
    "deltanet": (Uniform, Linear, OnlineSGD),
    "gated_deltanet": (Gates, Linear, OnlineSGD),
    "longhorn": (Uniform, Linear, ImplicitStep),
    "deltaproduct": (Uniform, Linear, StepsPerToken),
    "gated_deltaproduct": (Gates, Linear, StepsPerToken),
    "ttt_linear": (Uniform, Linear, MiniBatchGD),
    "ttt_mlp": (Uniform, MLP, MiniBatchGD),
    "titans": (Uniform, MLP, MomentumSGD),
    "rls": (Uniform, Linear, RecursiveLeastSquares),
    "mesa": (Gates, Linear, ExactSolve),
    "mesa_cg": (Gates, Linear, ConjugateGradient),
    "softmax_attention": (Uniform, LocalConstant, ExactSolve),
    "local_linear_attention": (Uniform, LocalLinear, ExactSolve),
    "kernel_ridge": (Uniform, KernelRidge, ExactSolve),
}


def named_layer(name: str, *, ridge: float | None = None, **options: Any) -> TestTimeRegression:
    """The layer called ``name`` as a :class:`TestTimeRegression` (see :data:`NAMED_LAYERS`).

    Args:
        name: one of ``NAMED_LAYERS``.
        ridge: the ridge of RLS / Mesa (default 1.0, as ``ops.rls_recurrent``; constant in time), of mesa_cg,
            local linear attention and kernel ridge (default 1e-3).
        options: passed to the optimiser, e.g. ``num_householder=3`` (deltaproduct), ``steps=3`` (mesa_cg),
            ``mini_batch_size=4`` (TTT); an old name (``steps`` of deltaproduct, ``batch_size``) warns and works.
    Raises:
        ValueError: an unknown name (the message lists the valid ones) or a ridge on a layer that has none.
        TypeError: an option the optimiser does not take.
    """
    if name not in NAMED_LAYERS:
        raise ValueError(f"name: unknown layer {name!r}; valid names are {', '.join(NAMED_LAYERS)}")
    weights, function_class, optimizer = NAMED_LAYERS[name]
    if optimizer is ExactSolve and function_class is LocalConstant:
        if ridge is not None:
            raise ValueError(f"ridge: {name} inverts nothing, so it takes no ridge")
        opt = ExactSolve(ridge=0.0, **options)
    elif optimizer in (ExactSolve, RecursiveLeastSquares, ConjugateGradient):
        default = 1.0 if name in ("rls", "mesa") else 1e-3  # the default ridge of ops.rls_recurrent
        opt = optimizer(ridge=default if ridge is None else ridge, **options)
    else:
        if ridge is not None:
            raise ValueError(f"ridge: {name} inverts nothing, so it takes no ridge")
        renames = getattr(optimizer.__init__, "renamed_arguments", {})  # old option names warn at the caller's line
        opt = optimizer(**rename_keywords(options, renames, f"named_layer({name!r})"))
    return TestTimeRegression(weights=weights(), function_class=function_class(), optimizer=opt)
