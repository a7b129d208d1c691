"""Test-time regression (Wang, Shi, Fox 2025): a sequence layer is a regression solved at test time.

A layer *memorises* its context by fitting a function ``m`` to the key-value pairs seen so far and *retrieves* by
evaluating it at the query (Wang, Shi, Fox 2025, eq. 1-2)::

    m_t = argmin_{m ∈ M}  ½ Σ_{i≤t} γ_i^{(t)} ‖v_i − m(k_i)‖²          y_t = m_t(q_t)

Three independent choices make a layer, and :class:`TestTimeRegression` takes exactly these three:

* ``weights``, the regression weights ``γ_i^{(t)}``: :class:`Uniform` (1), :class:`ExponentialDecay` (``γ^{t−i}``)
  or data-dependent :class:`Gates` (``Π_{j=i+1..t} exp(g_j)``, ``g`` the per-token log decay);
* ``function_class``, the family ``M``: :class:`Linear` (``m(x) = Sᵀx``), :class:`LocalConstant` (a kernel
  smoother, Nadaraya–Watson) or :class:`LocalLinear` (a kernel-weighted linear fit around each query);
* ``optimizer``, how the regression is solved: :class:`ExactSolve` (closed form, with a ridge),
  :class:`RecursiveLeastSquares` (the exact answer updated online by Sherman–Morrison), :class:`GradientStep`
  (one gradient step from zero), :class:`OnlineSGD` (one step of size ``β_t`` per new pair) or
  :class:`MultiPassSGD` (several online passes over the prefix).

The named layers of the field are points in this space (:data:`NAMED_LAYERS`)::

    linear attention        Uniform  × Linear        × GradientStep      (covariance ignored: Σ k kᵀ ≈ I)
    gated linear attention  Gates    × Linear        × GradientStep
    DeltaNet                Uniform  × Linear        × OnlineSGD
    gated DeltaNet          Gates    × Linear        × OnlineSGD
    RLS / Mesa              Uniform  × Linear        × RecursiveLeastSquares (or ExactSolve)
    softmax attention       Uniform  × LocalConstant × ExactSolve        (Nadaraya–Watson, kernel exp(s q·k))
    local linear attention  Uniform  × LocalLinear   × ExactSolve

The generic path here is written from the objective above, not from the specialised ops in :mod:`ttr_edu.ops`;
the tests prove each named layer equals its op. Tensors follow the flash-linear-attention layout: ``q, k`` are
``(B, T, H, D_k)``, ``v`` is ``(B, T, H, D_v)``, ``beta`` and ``g`` are ``(B, T, H)``, a state ``S`` is
``(B, H, D_k, D_v)`` (the papers' fast weight is ``W = Sᵀ``) and the query is scaled by ``scale`` (default
``D_k ** -0.5``). The maths runs in fp32 (fp64 for fp64 inputs) and ``o`` has the dtype of ``q``.

Ridge terms. The key covariance ``Σ γ k kᵀ`` is singular while fewer than ``D_k`` keys have been seen and
ill-conditioned when keys are nearly collinear. Every optimiser that inverts it adds ``λ I`` (``ridge > 0``), which
makes the system positive definite: the answer is then the ridge-regression solution, finite for any input.
A ridge ``λ ≤ 0`` where an inverse is needed raises ``ValueError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ttr_edu._validation import Dims, check_positive_float, check_positive_int, check_same_device, check_tensor
from ttr_edu._validation import check_decayed_sum_args
from ttr_edu.ops._common import decay_matrix

__all__ = [
    "Uniform",
    "ExponentialDecay",
    "Gates",
    "Linear",
    "LocalConstant",
    "LocalLinear",
    "ExactSolve",
    "RecursiveLeastSquares",
    "GradientStep",
    "OnlineSGD",
    "MultiPassSGD",
    "TestTimeRegression",
    "regression_weights",
    "decayed_cumsum",
    "NAMED_LAYERS",
    "named_layer",
]

# --------------------------------------------------------------------------------------------------------------
# Choice 1: the regression weights γ_i^{(t)}. All three have the recursive form γ_i^{(t)} = exp(g_t) γ_i^{(t−1)},
# γ_t^{(t)} = 1, so each is described by a per-token log decay g (None: no decay).
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Uniform:
    """``γ_i^{(t)} = 1``: every pair seen so far counts equally (linear attention, DeltaNet, softmax attention)."""

    def log_decay(self, g, dims: Dims, dtype, device):
        if g is not None:
            raise ValueError("g: weights=Uniform() has no decay, so it takes no g; use weights=Gates() for gates")
        return None


@dataclass(frozen=True)
class ExponentialDecay:
    """``γ_i^{(t)} = gamma^{t−i}`` with a fixed ``gamma ∈ (0, 1]`` (RetNet-style decay; Wang et al. 2025 §3.2).

    Raises:
        ValueError: ``gamma`` outside ``(0, 1]``.
    """

    gamma: float

    def __post_init__(self):
        check_positive_float("gamma", self.gamma)
        if self.gamma > 1:
            raise ValueError(f"gamma: expected a decay in (0, 1], got {self.gamma}")

    def log_decay(self, g, dims: Dims, dtype, device):
        if g is not None:
            raise ValueError("g: weights=ExponentialDecay(gamma) fixes the decay, so it takes no g; use Gates()")
        return torch.full((dims["B"], dims["T"], dims["H"]), math.log(self.gamma), dtype=dtype, device=device)


@dataclass(frozen=True)
class Gates:
    """Data-dependent weights ``γ_i^{(t)} = Π_{j=i+1..t} exp(g_j)`` from the call's log decay ``g ≤ 0``, ``(B, T, H)``.

    This is the weighting behind gated linear attention and gated DeltaNet (Wang et al. 2025 §3.2; Yang et al.
    2024). Raises ``ValueError`` at the call when ``g`` is missing or positive somewhere.
    """

    def log_decay(self, g, dims: Dims, dtype, device):
        if g is None:
            raise ValueError("g: weights=Gates() needs the log decay g, shaped (B, T, H), at the call")
        dims.bind("g", g, ("B", "T", "H"))
        if (g > 0).any():
            raise ValueError(f"g: expected a log decay <= 0 (a gate exp(g) in (0, 1]), got max {g.max().item():.4g}")
        return g.to(dtype)


WEIGHTS = (Uniform, ExponentialDecay, Gates)

# --------------------------------------------------------------------------------------------------------------
# Choice 2: the function class M.
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Linear:
    """``m(x) = Sᵀ x`` with ``S`` of shape ``(D_k, D_v)``: parametric linear regression (Wang et al. 2025 §3)."""


@dataclass(frozen=True)
class LocalConstant:
    """Order-0 local regression: ``m_t(q) = argmin_c Σ γ_i κ(q, k_i) ‖v_i − c‖²``, the Nadaraya–Watson smoother.

    Args:
        kernel: ``"softmax"``: ``κ = exp(scale · q·k)``, which is softmax attention; ``"gaussian"``:
            ``κ = exp(−scale ‖q − k‖² / 2)``, a true Gaussian kernel smoother of bandwidth ``h = scale^{-1/2}``.
            The two agree exactly when all keys have one norm (QK-norm), see Wang et al. 2025 §4.1.
    """

    kernel: str = "softmax"

    def __post_init__(self):
        if self.kernel not in ("softmax", "gaussian"):
            raise ValueError(f"kernel: expected 'softmax' or 'gaussian', got {self.kernel!r}")


@dataclass(frozen=True)
class LocalLinear:
    """Order-1 local regression: ``ŷ = v̄ + Σ_vk (Σ_kk + λI)⁻¹ (q − k̄)`` (Wang et al. 2025 §4.2).

    The means and covariances are weighted by the normalised kernel ``γ_i κ(q, k_i)``, with ``kernel`` as in
    :class:`LocalConstant` (``"softmax"``: local linear attention). Fitting a slope removes the first-order bias a
    kernel smoother has where the keys lie on one side of the query (a boundary).
    """

    kernel: str = "softmax"

    def __post_init__(self):
        if self.kernel not in ("softmax", "gaussian"):
            raise ValueError(f"kernel: expected 'softmax' or 'gaussian', got {self.kernel!r}")


FUNCTION_CLASSES = (Linear, LocalConstant, LocalLinear)

# --------------------------------------------------------------------------------------------------------------
# Choice 3: the optimiser.
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExactSolve:
    """The closed-form minimiser. For :class:`Linear`: ``S_t = (Σ γ k kᵀ + λI)⁻¹ Σ γ k vᵀ`` with a constant ridge
    ``λ = ridge`` (as flash-linear-attention's Mesa layer). Local classes are solved in closed form per query.

    ``ridge = 0`` is allowed only where nothing is inverted (:class:`LocalConstant`). Raises ``ValueError`` for a
    negative ridge.
    """

    ridge: float = 1e-3

    def __post_init__(self):
        check_positive_float("ridge", self.ridge, allow_zero=True)


@dataclass(frozen=True)
class RecursiveLeastSquares:
    """Recursive least squares: the exact solution updated online by Sherman–Morrison (the Mesa layer).

    ``P_t = (α_t P_{t−1}⁻¹ + k kᵀ)⁻¹`` and ``S_t = S_{t−1} + P_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ``, from ``P_0 = I/λ``.
    The ridge is the prior's weight and decays with the data (classical forgetting-factor RLS), so with decaying
    weights the solution is ``(Σ γ k kᵀ + γ_0^{(t)} λ I)⁻¹ Σ γ k vᵀ``; with :class:`Uniform` weights it equals
    :class:`ExactSolve` with the same ridge. Raises ``ValueError`` unless ``ridge > 0``.
    """

    ridge: float = 1.0

    def __post_init__(self):
        check_positive_float("ridge", self.ridge)


@dataclass(frozen=True)
class GradientStep:
    """One gradient step of size ``lr`` from ``m = 0``: ``S_t = lr · Σ γ k vᵀ``, i.e. the covariance taken as ``I``.

    The gradient of the weighted loss at zero is ``−Σ γ k vᵀ`` whatever the keys are: this is linear attention
    (Wang et al. 2025 §3.1). An ``initial_state`` is carried along (decayed), as the memory of earlier segments.
    """

    lr: float = 1.0

    def __post_init__(self):
        check_positive_float("lr", self.lr)


@dataclass(frozen=True)
class OnlineSGD:
    """One SGD step per new pair on ``½‖v_t − Sᵀk_t‖²`` with the call's step size ``beta_t``: DeltaNet.

    ``S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ``: the old state is first down-weighted by the decay
    ``α_t = exp(g_t)`` of the weights, then stepped (gated DeltaNet; Wang et al. 2025 §3.3).

    Args:
        chunk_size: how many steps are computed together: their errors solve one triangular system (see
            ``_online_sgd``); ``1`` takes the steps one by one. A speed setting only: every ``chunk_size`` gives
            the same result up to rounding (it is not mini-batch SGD).

    Raises:
        TypeError: ``chunk_size`` not an int (bools included).
        ValueError: ``chunk_size`` ≤ 0.
    """

    chunk_size: int = 64

    def __post_init__(self):
        check_positive_int("chunk_size", self.chunk_size)


@dataclass(frozen=True)
class MultiPassSGD:
    """``passes`` cyclic passes of online SGD over the prefix ``1..t``, for every ``t``; step ``β_i γ_i^{(t)}``.

    One pass with :class:`Uniform` weights is DeltaNet. More passes with a small step approach the least-squares
    answer (Kaczmarz's method), the exact solution RLS computes. The cost is ``O(passes · T² · D_k · D_v)``: a
    teaching tool for short sequences.
    """

    passes: int = 2

    def __post_init__(self):
        check_positive_int("passes", self.passes)


OPTIMIZERS = (ExactSolve, RecursiveLeastSquares, GradientStep, OnlineSGD, MultiPassSGD)

# --------------------------------------------------------------------------------------------------------------
# The weights as matrices and sums.
# --------------------------------------------------------------------------------------------------------------


def regression_weights(g: torch.Tensor | None, T: int | None = None) -> torch.Tensor:
    """The weight matrix ``Γ[t, i] = γ_i^{(t)} = exp(Σ_{j=i+1..t} g_j)`` for ``i ≤ t`` and 0 above the diagonal.

    Args:
        g: log decays ``(B, T, H)``, or ``None`` for uniform weights (then ``T`` is needed).
        T: the sequence length when ``g`` is ``None``.
    Returns:
        ``Γ`` of shape ``(B, H, T, T)`` (``(1, 1, T, T)`` when ``g`` is ``None``), the dtype of ``g`` (fp32 if None).
    Raises:
        ValueError: ``g`` not ``(B, T, H)``, or neither ``g`` nor ``T`` given.

    The differences of the cumulative sum are taken in fp64, and the upper triangle is masked before the exponential,
    so no ``exp(+large)`` appears and no ``inf · 0`` either.
    """
    if g is None:
        if T is None:
            raise ValueError("T: needed when g is None (uniform weights)")
        check_positive_int("T", T)
        return torch.ones(T, T).tril()[None, None]
    Dims().bind("g", g, ("B", "T", "H"))
    G = g.double().cumsum(1).transpose(1, 2)  # (B, H, T): log of the product of decays up to t
    log_gamma = G[..., :, None] - G[..., None, :]  # (B, H, T, T): Σ_{j=i+1..t} g_j
    causal = torch.ones(g.shape[1], g.shape[1], dtype=torch.bool, device=g.device).tril()
    return log_gamma.masked_fill(~causal, -math.inf).exp().to(g.dtype)


def decayed_cumsum(x: torch.Tensor, g: torch.Tensor | None, chunk_size: int = 64) -> torch.Tensor:
    """``y_t = exp(g_t) y_{t−1} + x_t``, i.e. ``y_t = Σ_{i≤t} γ_i^{(t)} x_i``, along the time axis.

    Args:
        x: ``(B, H, T, *F)`` (heads-first), any trailing feature shape.
        g: ``(B, H, T)`` log decays, or ``None`` for a plain cumulative sum.
        chunk_size: the sum runs as dense ``C × C`` weight blocks within chunks and a carry between them, so the
            cost is ``O(T · C · |F|)`` instead of the ``O(T² |F|)`` of a full weight matrix.
    Returns:
        ``y``, the shape and dtype of ``x``.
    """
    check_decayed_sum_args(x, g, chunk_size)  # the input policy of ttr_edu._validation
    if g is None:
        return x.cumsum(2)
    B, H, T = x.shape[:3]
    C = min(chunk_size, T)
    pad = (-T) % C
    flat = x.reshape(B, H, T, -1)
    if pad:  # a zero input with a zero log decay changes nothing; the padded rows are cut off below
        flat = torch.nn.functional.pad(flat, (0, 0, 0, pad))
        g = torch.nn.functional.pad(g, (0, pad))
    N = flat.shape[2] // C
    xc = flat.reshape(B, H, N, C, -1)
    Gc = g.reshape(B, H, N, C).cumsum(-1)  # log decay from the chunk start
    causal = torch.ones(C, C, dtype=torch.bool, device=x.device).tril()
    local = (Gc[..., :, None] - Gc[..., None, :]).masked_fill(~causal, -math.inf).exp()  # (B, H, N, C, C)
    inner = local @ xc  # the sums within each chunk
    carry = torch.zeros_like(xc[:, :, 0, 0])  # (B, H, F): the sum up to the end of the previous chunk
    chunks = []
    for n in range(N):
        y = inner[:, :, n] + Gc[:, :, n, :, None].exp() * carry[:, :, None]
        chunks.append(y)
        carry = y[:, :, -1]
    return torch.stack(chunks, 2).reshape(B, H, N * C, *x.shape[3:])[:, :, :T]


# --------------------------------------------------------------------------------------------------------------
# The framework.
# --------------------------------------------------------------------------------------------------------------


class TestTimeRegression:
    """A sequence layer given by its three design choices (Wang, Shi, Fox 2025).

    Args:
        weights: :class:`Uniform`, :class:`ExponentialDecay` or :class:`Gates`.
        function_class: :class:`Linear`, :class:`LocalConstant` or :class:`LocalLinear`.
        optimizer: :class:`ExactSolve`, :class:`RecursiveLeastSquares`, :class:`GradientStep`, :class:`OnlineSGD`
            or :class:`MultiPassSGD`.

    Raises:
        TypeError: a choice of the wrong kind (the message lists the valid ones).
        ValueError: an invalid combination, with the reason: a local (nonparametric) class is refitted at every
            query and has only its closed form, so it needs :class:`ExactSolve`; an inverse needs ``ridge > 0``.

    Example::

        deltanet = TestTimeRegression(weights=Uniform(), function_class=Linear(), optimizer=OnlineSGD())
        o, S = deltanet(q, k, v, beta=beta, output_final_state=True)
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, weights, function_class, optimizer) -> None:
        for name, value, kinds in (
            ("weights", weights, WEIGHTS),
            ("function_class", function_class, FUNCTION_CLASSES),
            ("optimizer", optimizer, OPTIMIZERS),
        ):
            if not isinstance(value, kinds):
                valid = ", ".join(f"{kind.__name__}()" for kind in kinds)
                raise TypeError(f"{name}: expected one of {valid}, got {value!r}")
        local = isinstance(function_class, (LocalConstant, LocalLinear))
        if local and not isinstance(optimizer, ExactSolve):
            raise ValueError(
                f"optimizer: {type(function_class).__name__} is a local (nonparametric) fit redone at every query "
                f"from all stored pairs; it has no parameter carried from step to step for "
                f"{type(optimizer).__name__} to update, only its closed form: use optimizer=ExactSolve()"
            )
        needs_inverse = isinstance(function_class, (Linear, LocalLinear)) and isinstance(optimizer, ExactSolve)
        if needs_inverse and optimizer.ridge <= 0:
            raise ValueError(
                f"optimizer: ExactSolve(ridge={optimizer.ridge}) with {type(function_class).__name__} inverts the key "
                "covariance, which is singular while fewer than D_k keys are seen; use a ridge > 0 (e.g. 1e-3)"
            )
        self.weights, self.function_class, self.optimizer = weights, function_class, optimizer

    def __repr__(self) -> str:
        return (
            f"TestTimeRegression(weights={self.weights!r}, function_class={self.function_class!r}, "
            f"optimizer={self.optimizer!r})"
        )

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
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Memorise ``(k_i, v_i)`` and retrieve ``y_t = m_t(q_t)`` for every ``t`` (causal).

        Args:
            q, k: ``(B, T, H, D_k)`` floating tensors; v: ``(B, T, H, D_v)``, the same dtype and device.
            beta: ``(B, T, H)`` step sizes, required by :class:`OnlineSGD` and :class:`MultiPassSGD` only.
            g: ``(B, T, H)`` log decays ``≤ 0``, required by :class:`Gates` only.
            scale: the query scale (``D_k ** -0.5`` by default). Linear class: ``y = m(scale · q)``;
                local classes: the kernel's inverse squared bandwidth, ``κ = exp(scale · q·k)``.
            initial_state: ``(B, H, D_k, D_v)``, a starting ``S`` for :class:`GradientStep`, :class:`OnlineSGD`
                and :class:`MultiPassSGD` (it decays with the weights).
            output_final_state: also return ``S_T`` (linear class only).

        Returns:
            ``(o, S_T)`` with ``o`` ``(B, T, H, D_v)`` in the dtype of ``q`` and ``S_T`` ``(B, H, D_k, D_v)`` in the
            compute dtype (fp32, or fp64 for fp64 inputs), or ``(o, None)``.

        Raises:
            TypeError: non-tensors, integer dtypes, or ``k``/``v`` of another dtype than ``q``.
            ValueError: shapes that disagree (the message names the argument and the dims), T = 0, tensors on
                different devices, a missing or superfluous ``beta``/``g``, or a state the chosen class does not keep.
        """
        dims = Dims()
        dims.bind("q", q, ("B", "T", "H", "D_k"))
        dims.bind("k", k, ("B", "T", "H", "D_k"))
        dims.bind("v", v, ("B", "T", "H", "D_v"))
        if dims["T"] == 0:
            raise ValueError(f"q: expected at least one token, got shape {tuple(q.shape)} with T = 0")
        for name, x in (("k", k), ("v", v)):
            if x.dtype != q.dtype:
                raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {x.dtype}")
        for name, x in (("beta", beta), ("g", g), ("initial_state", initial_state)):
            check_tensor(name, x, allow_none=True)
        check_same_device(q=q, k=k, v=v, beta=beta, g=g, initial_state=initial_state)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        scale = dims["D_k"] ** -0.5 if scale is None else check_positive_float("scale", scale)

        stepped = isinstance(self.optimizer, (OnlineSGD, MultiPassSGD))
        if stepped and beta is None:
            raise ValueError(f"beta: optimizer={type(self.optimizer).__name__}() needs step sizes beta, (B, T, H)")
        if not stepped and beta is not None:
            raise ValueError(f"beta: optimizer={type(self.optimizer).__name__}() takes no step sizes beta")
        if beta is not None:
            dims.bind("beta", beta, ("B", "T", "H"))
        parametric = isinstance(self.function_class, Linear)
        if not parametric and output_final_state:
            raise ValueError(
                f"output_final_state: {type(self.function_class).__name__} keeps every pair (its state is the "
                "key-value cache), not a fixed-size S"
            )
        if initial_state is not None:
            if not isinstance(self.optimizer, (GradientStep, OnlineSGD, MultiPassSGD)):
                raise ValueError(
                    f"initial_state: {type(self.optimizer).__name__} solves from the pairs alone (RLS would also "
                    "need the inverse covariance P); pass the earlier pairs instead"
                )
            dims.bind("initial_state", initial_state, ("B", "H", "D_k", "D_v"))

        g = self.weights.log_decay(g, dims, dtype, q.device)
        out_dtype = q.dtype
        q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, D): time next to features
        g = None if g is None else g.transpose(1, 2)  # (B, H, T)
        beta = None if beta is None else beta.to(dtype).transpose(1, 2)
        S0 = None if initial_state is None else initial_state.to(dtype)

        if isinstance(self.function_class, LocalConstant):
            o, S = _local_constant(q, k, v, g, scale, self.function_class.kernel), None
        elif isinstance(self.function_class, LocalLinear):
            o, S = _local_linear(q, k, v, g, scale, self.optimizer.ridge, self.function_class.kernel), None
        else:
            solve = {
                ExactSolve: _exact_solve,
                RecursiveLeastSquares: _recursive_least_squares,
                GradientStep: _gradient_step,
                OnlineSGD: _online_sgd,
                MultiPassSGD: _multi_pass_sgd,
            }[type(self.optimizer)]
            o, S = solve(self.optimizer, scale * q, k, v, g, beta, S0)
        o = o.transpose(1, 2).to(out_dtype)
        return o, (S if output_final_state else None)

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
        M, N = dims["M"], dims["N"]
        if isinstance(self.function_class, Linear):  # a parametric memory: fit once, read S_N at every query
            kw = {name: x[None, :, None] for name, x in (("beta", beta), ("g", g)) if x is not None}
            _, S = self(k[None, :, None], k[None, :, None], v[None, :, None], scale=1.0, output_final_state=True, **kw)
            scale = dims["D_k"] ** -0.5 if scale is None else check_positive_float("scale", scale)
            return (scale * queries.to(S.dtype) @ S[0, 0]).to(queries.dtype)
        # Each query gets its own copy of the sequence and is asked at the last position, which sees all N pairs.
        per_token = {}
        for name, x in (("beta", beta), ("g", g)):
            if x is not None:
                dims.bind(name, x, ("N",))
                per_token[name] = x[None, :, None].expand(M, N, 1)
        q = queries[:, None, None, :].expand(M, N, 1, dims["D_k"])
        o, _ = self(q, k[None, :, None].expand(M, N, 1, -1), v[None, :, None].expand(M, N, 1, -1), scale=scale,
                    **per_token)
        return o[:, -1, 0]


# --------------------------------------------------------------------------------------------------------------
# The linear class. Tensors are heads-first: q, k (B, H, T, D_k), v (B, H, T, D_v), g, beta (B, H, T); q is scaled.
# --------------------------------------------------------------------------------------------------------------


def _decay_from_start(g, like):
    """``γ_0^{(t)} = exp(Σ_{j≤t} g_j)``, ``(B, H, T)``: the weight left on an initial state at step ``t``."""
    if g is None:
        return torch.ones_like(like[..., 0])
    return g.cumsum(-1).exp()


def _weighted_readout(x, k, v, g, chunk_size: int = 64):
    """``o_t = Σ_{i≤t} γ_i^{(t)} (x_t·k_i) v_i`` for every ``t``, and ``M_T = Σ_i γ_i^{(T)} k_i v_iᵀ``.

    The weighted sum over stored pairs that every linear-class readout needs. It runs in chunks of ``C`` tokens:
    inside a chunk with the dense weight block ``Γ``, across chunks through the weighted moment ``M`` at each chunk
    boundary, so nothing of size ``T × T`` is formed. Shapes are heads-first: ``x, k`` ``(B, H, T, D_k)``, ``v``
    ``(B, H, T, D_v)``, ``g`` ``(B, H, T)`` or ``None`` (uniform weights: no exponentials at all).
    """
    B, H, T, _ = k.shape
    C = min(chunk_size, T)
    pad = (-T) % C
    if pad:  # zero keys write nothing and a zero log decay keeps the sum: the padding is inert
        x, k, v = (torch.nn.functional.pad(y, (0, 0, 0, pad)) for y in (x, k, v))
        g = None if g is None else torch.nn.functional.pad(g, (0, pad))
    N = (T + pad) // C
    xc, kc, vc = (y.reshape(B, H, N, C, -1) for y in (x, k, v))
    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    if g is None:
        inside = (xc @ kc.transpose(-1, -2)).masked_fill(~causal, 0.0) @ vc  # (B, H, N, C, D_v)
        moments = (kc.transpose(-1, -2) @ vc).cumsum(2)  # M after each chunk: (B, H, N, D_k, D_v)
        decay_to_t = None
    else:
        G = g.reshape(B, H, N, C).cumsum(-1)  # log weight of the chunk start seen from each position
        gamma = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, -math.inf).exp()  # Γ inside each chunk
        inside = ((xc @ kc.transpose(-1, -2)) * gamma) @ vc
        writes = (kc * (G[..., -1:] - G).exp()[..., None]).transpose(-1, -2) @ vc  # each chunk's M at its end
        moments = decayed_cumsum(writes, G[..., -1])
        decay_to_t = G.exp()[..., None]
    before = torch.cat([torch.zeros_like(moments[:, :, :1]), moments[:, :, :-1]], dim=2)
    earlier = (xc if decay_to_t is None else xc * decay_to_t) @ before  # the pairs of earlier chunks
    o = (inside + earlier).reshape(B, H, N * C, -1)[:, :, :T]
    return o, moments[:, :, -1]


def _gradient_step(opt: GradientStep, q, k, v, g, beta, S0):
    """``S_t = lr Σ_i γ_i^{(t)} k_i v_iᵀ`` (minus the gradient at zero): ``o_t = lr Σ_i γ_i^{(t)} (q_t·k_i) v_i``."""
    o, S = _weighted_readout(q, k, v, g)
    o, S = opt.lr * o, opt.lr * S
    if S0 is not None:
        carried = _decay_from_start(g, q)  # (B, H, T)
        o = o + carried[..., None] * (q @ S0)
        S = S + carried[..., -1, None, None] * S0
    return o, S


def _online_sgd(opt: OnlineSGD, q, k, v, g, beta, S0):
    """``S_t = α_t S_{t−1} + k_t e_tᵀ`` with the step's error ``e_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)``; ``o_t = S_tᵀ q_t``.

    One step per pair is the definition, and a loop over pairs would take it literally. But steps on a linear
    regressor compose. In a chunk of C pairs that starts from ``S_0``, with ``Γ_ij`` the weight the decays leave from
    step j to step i and ``γ_i`` the one left on ``S_0``, the state before step i is read as
    ``α_i S_{i−1} = γ_i S_0 + Σ_{j<i} Γ_ij k_j e_jᵀ``. So the chunk's errors solve one unit lower-triangular system,

        e_i + β_i Σ_{j<i} Γ_ij (k_i·k_j) e_j = β_i (v_i − γ_i S_0ᵀ k_i),

    (each error corrected for the steps before it in the chunk), and then

        o_i = γ_i S_0ᵀ q_i + Σ_{j≤i} Γ_ij (q_i·k_j) e_j,      S_C = γ_C S_0 + Σ_j Γ_Cj k_j e_jᵀ.

    The solve stays inside the loop over chunks, since its right side needs ``S_0``. The ops of chapter 09 hoist it
    out of the loop instead (the WY/UT form: ``e = U − W S_0``), which is faster but further from the objective.
    """
    B, H, T, D_k = k.shape
    S = k.new_zeros(B, H, D_k, v.shape[-1]) if S0 is None else S0
    outputs = []
    for start in range(0, T, opt.chunk_size):
        chunk = slice(start, start + opt.chunk_size)
        q_c, k_c, v_c, beta_c = q[:, :, chunk], k[:, :, chunk], v[:, :, chunk], beta[:, :, chunk, None]
        g_c = None if g is None else g[:, :, chunk]
        gamma = _decay_from_start(g_c, k_c)[..., None]  # (B, H, C, 1): γ_i = exp(Σ_{l≤i} g_l), the weight on S_0
        if g is None:  # uniform weights: Γ is the causal mask
            Gamma = torch.ones(k_c.shape[2], k_c.shape[2], dtype=k.dtype, device=k.device).tril()
        else:
            Gamma = decay_matrix(g_c)  # (B, H, C, C): Γ_ij = exp(Σ_{l=j+1..i} g_l), 0 above the diagonal
        system = beta_c * (k_c @ k_c.mT) * Gamma  # its strict lower triangle; the diagonal is taken as ones
        right = beta_c * (v_c - gamma * (k_c @ S))
        errors = torch.linalg.solve_triangular(system, right, upper=False, unitriangular=True)  # (B, H, C, D_v)
        outputs.append(gamma * (q_c @ S) + ((q_c @ k_c.mT) * Gamma) @ errors)
        S = gamma[..., -1:, :] * S + (Gamma[..., -1, :, None] * k_c).mT @ errors
    return torch.cat(outputs, dim=2), S


def _multi_pass_sgd(opt: MultiPassSGD, q, k, v, g, beta, S0):
    """For every prefix ``t`` at once: ``passes`` cyclic SGD passes over ``i = 1..t``, step ``β_i Γ[t, i]``."""
    B, H, T, D_k = k.shape
    if g is None:
        gamma = regression_weights(None, T).to(q).expand(B, H, T, T)
    else:
        gamma = regression_weights(g.transpose(1, 2)).to(q)  # (B, H, T, T)
    S = k.new_zeros(B, H, T, D_k, v.shape[-1])  # one state per prefix t
    if S0 is not None:  # the prior memory, faded to each prefix as in the other optimisers
        S = S + _decay_from_start(g, q)[..., None, None] * S0[:, :, None]
    for _ in range(opt.passes):
        for i in range(T):
            k_i = k[:, :, i]  # (B, H, D_k)
            error = v[:, :, i, None] - torch.einsum("bhk,bhtkv->bhtv", k_i, S)  # (B, H, T, D_v)
            step = beta[:, :, i, None] * gamma[:, :, :, i]  # (B, H, T): zero for prefixes t < i
            S = S + torch.einsum("bht,bhk,bhtv->bhtkv", step, k_i, error)
    o = torch.einsum("bhtk,bhtkv->bhtv", q, S)
    return o, S[:, :, -1]


def _covariances(k, g):
    """``A_t = Σ_i γ_i^{(t)} k_i k_iᵀ`` for every ``t``: ``(B, H, T, D_k, D_k)``."""
    return decayed_cumsum(k[..., :, None] * k[..., None, :], g)


def _exact_solve(opt: ExactSolve, q, k, v, g, beta, S0):
    """``S_t = (A_t + λI)⁻¹ Σ γ k vᵀ``, read as ``o_t = Σ_i γ_i^{(t)} (k_i·x_t) v_i`` with ``x_t = (A_t + λI)⁻¹ q_t``.

    The readout never forms ``S_t``: one ``D_k × D_k`` Cholesky solve per step, then the weighted sum over pairs.
    """
    D_k = q.shape[3]
    eye = torch.eye(D_k, dtype=q.dtype, device=q.device)
    A = _covariances(k, g) + opt.ridge * eye  # positive definite since ridge > 0
    L, info = torch.linalg.cholesky_ex(A)
    _raise_if_not_factorised(info, "the key covariance plus ridge")
    x = torch.cholesky_solve(q[..., None], L)[..., 0]  # (B, H, T, D_k)
    o, moment = _weighted_readout(x, k, v, g)
    S = torch.cholesky_solve(moment, L[:, :, -1])
    return o, S


def _recursive_least_squares(opt: RecursiveLeastSquares, q, k, v, g, beta, S0):
    """Sherman–Morrison: ``P̃ = P/α``, ``u = P̃ k``, ``P ← P̃ − u uᵀ/(1 + kᵀu)``, ``S ← S + (P k)(v − Sᵀk)ᵀ``."""
    B, H, T, D_k = k.shape
    D_v = v.shape[-1]
    P = torch.eye(D_k, dtype=q.dtype, device=q.device).expand(B * H, D_k, D_k) / opt.ridge
    S = k.new_zeros(B * H, D_k, D_v)
    q_t, k_t, v_t = (x.permute(2, 0, 1, 3).reshape(T, B * H, 1, -1) for x in (q, k, v))  # (T, B·H, 1, D)
    alpha = None if g is None else g.exp().permute(2, 0, 1).reshape(T, B * H, 1, 1)
    o = []
    for t in range(T):
        if alpha is not None:
            P = P / alpha[t]  # the old data (and the ridge) weigh α_t less: A_t = α_t A_{t−1} + k kᵀ
        u = torch.bmm(k_t[t], P)  # (B·H, 1, D_k): (P̃ k)ᵀ, P̃ symmetric
        gain = u / (1 + (k_t[t] * u).sum(-1, keepdim=True))  # (P_t k_t)ᵀ
        P = torch.baddbmm(P, gain.transpose(1, 2), u, alpha=-1.0)
        error = torch.baddbmm(v_t[t], k_t[t], S, alpha=-1.0)  # v_t − Sᵀ k_t
        S = torch.baddbmm(S, gain.transpose(1, 2), error)
        o.append(torch.bmm(q_t[t], S))
    o = torch.cat(o, 1).reshape(B, H, T, D_v)
    return o, S.reshape(B, H, D_k, D_v)


# --------------------------------------------------------------------------------------------------------------
# The local (nonparametric) classes.
# --------------------------------------------------------------------------------------------------------------


def _log_kernel_weights(q, k, g, scale, kernel):
    """``log(γ_i^{(t)} κ(q_t, k_i))`` for ``i ≤ t``, ``−inf`` above the diagonal: ``(B, H, T, T)``."""
    T = q.shape[2]
    logits = scale * (q @ k.transpose(-1, -2))  # exp(scale q·k): the softmax kernel
    if kernel == "gaussian":  # −scale ‖q − k‖²/2 = scale q·k − scale ‖q‖²/2 − scale ‖k‖²/2
        logits = logits - 0.5 * scale * (q.pow(2).sum(-1)[..., :, None] + k.pow(2).sum(-1)[..., None, :])
    if g is None:
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return logits.masked_fill(~causal, -math.inf)
    return logits + regression_weights(g.transpose(1, 2)).to(q).log()  # log 0 = −inf above the diagonal


def _local_constant(q, k, v, g, scale, kernel):
    """Nadaraya–Watson: ``y_t = Σ_i w_ti v_i`` with ``w_t = softmax_i(log γ_i^{(t)} κ(q_t, k_i))``."""
    return torch.softmax(_log_kernel_weights(q, k, g, scale, kernel), dim=-1) @ v


def _local_linear(q, k, v, g, scale, ridge, kernel):
    """``ŷ_t = v̄_t + Σ_vk,t (Σ_kk,t + λI)⁻¹ (q_t − k̄_t)`` with softmax weights ``w_t`` (Wang et al. 2025 §4.2).

    ``Σ_vk x = Σ_i w_i v_i (k_i·x) − v̄ (k̄·x)``, so the ``D_v × D_k`` cross-covariance is never formed. The ridge
    keeps ``Σ_kk + λI`` positive definite when fewer than ``D_k`` keys carry weight (early steps, peaked weights).
    """
    D_k = q.shape[-1]
    w = torch.softmax(_log_kernel_weights(q, k, g, scale, kernel), dim=-1)  # (B, H, T, T)
    k_mean, v_mean = w @ k, w @ v  # (B, H, T, D)
    second = (w @ (k[..., :, None] * k[..., None, :]).flatten(-2)).unflatten(-1, (D_k, D_k))  # Σ_i w_ti k_i k_iᵀ
    cov = second - k_mean[..., :, None] * k_mean[..., None, :]
    eye = torch.eye(D_k, dtype=q.dtype, device=q.device)
    L, info = torch.linalg.cholesky_ex(cov + ridge * eye)
    _raise_if_not_factorised(info, "the local key covariance plus ridge")
    x = torch.cholesky_solve((q - k_mean)[..., None], L)[..., 0]  # (Σ_kk + λI)⁻¹ (q − k̄)
    slope_term = (w * (x @ k.transpose(-1, -2))) @ v - v_mean * (k_mean * x).sum(-1, keepdim=True)
    return v_mean + slope_term


def _raise_if_not_factorised(info: torch.Tensor, what: str) -> None:
    if (info != 0).any():
        raise ValueError(
            f"{what} is not positive definite in floating point (non-finite inputs, or a ridge too small for the "
            "scale of the keys); check the inputs for NaN/inf or raise the ridge"
        )


# --------------------------------------------------------------------------------------------------------------
# The named layers of the field.
# --------------------------------------------------------------------------------------------------------------

NAMED_LAYERS: dict[str, tuple] = {
    "linear_attention": (Uniform, Linear, GradientStep),
    "gated_linear_attention": (Gates, Linear, GradientStep),
    "deltanet": (Uniform, Linear, OnlineSGD),
    "gated_deltanet": (Gates, Linear, OnlineSGD),
    "rls": (Uniform, Linear, RecursiveLeastSquares),
    "mesa": (Gates, Linear, RecursiveLeastSquares),
    "softmax_attention": (Uniform, LocalConstant, ExactSolve),
    "local_linear_attention": (Uniform, LocalLinear, ExactSolve),
}


def named_layer(name: str, *, ridge: float | None = None) -> TestTimeRegression:
    """The layer called ``name`` as a :class:`TestTimeRegression` (see :data:`NAMED_LAYERS`).

    Args:
        name: one of ``NAMED_LAYERS``.
        ridge: the ridge of RLS / Mesa (default 1.0) and local linear attention (default 1e-3).
    Raises:
        ValueError: an unknown name (the message lists the valid ones) or a ridge on a layer that has none.
    """
    if name not in NAMED_LAYERS:
        raise ValueError(f"name: unknown layer {name!r}; valid names are {', '.join(NAMED_LAYERS)}")
    weights, function_class, optimizer = NAMED_LAYERS[name]
    if optimizer is ExactSolve and function_class is LocalConstant:
        if ridge is not None:
            raise ValueError(f"ridge: {name} inverts nothing, so it takes no ridge")
        opt = ExactSolve(ridge=0.0)
    elif optimizer in (ExactSolve, RecursiveLeastSquares):
        default = 1.0 if optimizer is RecursiveLeastSquares else 1e-3
        opt = optimizer(ridge=default if ridge is None else ridge)
    else:
        if ridge is not None:
            raise ValueError(f"ridge: {name} inverts nothing, so it takes no ridge")
        opt = optimizer()
    return TestTimeRegression(weights=weights(), function_class=function_class(), optimizer=opt)
