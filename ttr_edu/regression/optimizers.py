"""Choice 3 of a test-time regression layer: the optimiser that fits the memory."""

from __future__ import annotations

from dataclasses import dataclass

from ttr_edu._internal.deprecation import renamed_arguments
from ttr_edu._internal.validation import check_positive_float, check_positive_int

__all__ = [
    "ExactSolve",
    "RecursiveLeastSquares",
    "GradientStep",
    "OnlineSGD",
    "MultiPassSGD",
    "ImplicitStep",
    "StepsPerToken",
    "MiniBatchGD",
    "MomentumSGD",
    "ConjugateGradient",
    "MAX_PASSES",
]


@dataclass(frozen=True)
class ExactSolve:
    """The closed-form minimiser. For :class:`Linear`: ``S_t = (Σ γ k kᵀ + λI)⁻¹ Σ γ k vᵀ`` with a constant ridge
    ``λ = ridge``: with :class:`Uniform` weights this is RLS, with :class:`Gates` the Mesa layer (MesaNet, von Oswald
    et al. 2025 eq. 6; flash-linear-attention's Mesa layer). Local classes are solved in closed form per query.

    ``ridge = 0`` is allowed only where nothing is inverted (:class:`LocalConstant`). Raises ``ValueError`` for a
    negative ridge.
    """

    ridge: float = 1e-3

    def __post_init__(self):
        check_positive_float("ridge", self.ridge, allow_zero=True)


@dataclass(frozen=True)
class RecursiveLeastSquares:
    """Recursive least squares: the exact solution updated online by Sherman–Morrison.

    ``P_t = (α_t P_{t−1}⁻¹ + k kᵀ)⁻¹`` and ``S_t = S_{t−1} + P_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ``, from ``P_0 = I/λ``.
    With :class:`Uniform` weights it equals :class:`ExactSolve` with the same ridge: this is "rls".

    With decaying weights (:class:`Gates`, :class:`ExponentialDecay`) it is classical forgetting-factor
    (exponentially weighted) RLS, NOT the Mesa layer: the ridge is the prior's weight and fades with the data, so the
    solution is ``S_t = (Σ_i γ_i^{(t)} k_i k_iᵀ + γ_0^{(t)} λ I)⁻¹ Σ_i γ_i^{(t)} k_i v_iᵀ``. Once ``γ_0^{(t)}`` is tiny
    the system is nearly unregularised and can go singular in fp32 (NaN at ordinary gates over long sequences), and a
    reset ``g = −inf`` is refused. Mesa keeps ``λ`` constant, ``S_t = (Σ_i γ_i^{(t)} k_i k_iᵀ + λ I)⁻¹ Σ_i γ_i^{(t)}
    k_i v_iᵀ`` (MesaNet, von Oswald et al. 2025, eq. 6 with a constant ridge): :class:`ExactSolve` (or
    :class:`ConjugateGradient`) with :class:`Gates`, ``named_layer("mesa")``.

    Mind the names: the op :func:`ttr_edu.ops.rls_recurrent` with ``g`` computes Mesa, not this class under
    ``Gates``; without gates the two are the same RLS. Raises ``ValueError`` unless ``ridge > 0``.
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


#: The most passes :class:`MultiPassSGD` takes: a teaching tool, whose every pass costs ``O(T² D_k D_v)``.
MAX_PASSES = 1000


@dataclass(frozen=True)
class MultiPassSGD:
    """``passes`` cyclic passes of online SGD over the prefix ``1..t``, for every ``t``; step ``β_i γ_i^{(t)}``.

    One pass with :class:`Uniform` weights is DeltaNet. More passes with a small step approach the least-squares
    answer (Kaczmarz's method), the exact solution RLS computes. The cost is ``O(passes · T² · D_k · D_v)``: a
    teaching tool for short sequences.

    Raises:
        TypeError / ValueError: ``passes`` not an int from 1 to :data:`MAX_PASSES` (1000).
    """

    passes: int = 2

    def __post_init__(self):
        check_positive_int("passes", self.passes, maximum=MAX_PASSES, why="each pass costs O(T² D_k D_v)")


OPTIMIZERS: tuple[type, ...] = (ExactSolve, RecursiveLeastSquares, GradientStep, OnlineSGD, MultiPassSGD)


# ---- adaptive steps, momentum, several steps, mini-batches, an iterative solver (chapter adaptive_and_deep_memories)


@dataclass(frozen=True)
class ImplicitStep:
    """The implicit (proximal) online step of Longhorn: ``S_t = argmin ‖S − S_{t−1}‖² + β_t ‖Sᵀk_t − v_t‖²``.

    Its closed form is the SGD step at the adapted size ``ε_t = β_t / (1 + β_t ‖k_t‖²)`` (Liu et al. 2024), stable for
    every ``β ≥ 0``. With :class:`Gates` the state is decayed first, as in :class:`OnlineSGD`. ``chunk_size`` as in
    :class:`OnlineSGD` (a speed setting only).
    """

    chunk_size: int = 64

    def __post_init__(self):
        check_positive_int("chunk_size", self.chunk_size)


@renamed_arguments(steps="num_householder")
@dataclass(frozen=True)
class StepsPerToken:
    """``num_householder`` online SGD steps per token, each on its own pair: DeltaProduct (Siems et al. 2025).

    The call then takes ``k``, ``v`` and ``beta`` with ``T·num_householder`` rows (token ``t``'s ``j``-th pair at row
    ``t·num_householder + j``, fla's layout) and ``q`` (and ``g``, applied once per token) with ``T``. Each step is
    a generalised Householder reflection of the state, hence the name, as in the op
    (:func:`ttr_edu.ops.delta_product_chunk`) and the layer. (``steps`` until release 0.2; the old name still works,
    with a ``DeprecationWarning``.)
    """

    num_householder: int = 2
    chunk_size: int = 64

    def __post_init__(self):
        check_positive_int("num_householder", self.num_householder)
        check_positive_int("chunk_size", self.chunk_size)


@renamed_arguments(batch_size="mini_batch_size")
@dataclass(frozen=True)
class MiniBatchGD:
    """Mini-batch gradient descent, the gradients of a mini-batch all taken at its starting state: TTT.

    ``W_t = W_s − Σ_{s<i≤t} β_i ∇ℓ(W_s; k_i, v_i)`` inside the mini-batch of ``mini_batch_size`` tokens that starts
    at ``W_s`` (Sun et al. 2024, §2.4). ``mini_batch_size = 1`` is online SGD (DeltaNet for the linear class). The
    linear class's gradient is written out; other classes (:class:`MLP`) take theirs by autodiff. (``batch_size``
    until release 0.2; the old name still works, with a ``DeprecationWarning``.)
    """

    mini_batch_size: int = 16

    def __post_init__(self):
        check_positive_int("mini_batch_size", self.mini_batch_size)


@renamed_arguments(momentum="eta", weight_decay="alpha")
@dataclass(frozen=True)
class MomentumSGD:
    """Online SGD with momentum and decoupled weight decay: Titans' memory (Behrouz et al. 2024, eqs. 13–14).

    ``U_t = η_t U_{t−1} − β_t ∇ℓ(W_{t−1}; k_t, v_t)``, ``W_t = (1 − α_t) W_{t−1} + U_t``. The per-token ``eta``
    and ``alpha`` ``(B, T, H)`` come with the call (as in :func:`ttr_edu.ops.titans_recurrent` and the layer);
    without them the constants ``eta`` (the momentum η) and ``alpha`` (the weight decay α) here are used.
    ``eta = alpha = 0`` is online SGD. (``momentum`` and ``weight_decay`` until release 0.2; the old names still
    work, with a ``DeprecationWarning``. ``momentum`` names Titans' surprise ``U`` in :class:`ttr_edu.ops.TitansState`.)

    Raises:
        ValueError: ``eta`` or ``alpha`` outside ``[0, 1]``.
    """

    eta: float = 0.0
    alpha: float = 0.0

    def __post_init__(self):
        for name in ("eta", "alpha"):
            value = check_positive_float(name, getattr(self, name), allow_zero=True)
            if value > 1:
                raise ValueError(f"{name}: expected a number in [0, 1], got {value}")


@dataclass(frozen=True)
class ConjugateGradient:
    """``steps`` conjugate-gradient iterations towards :class:`ExactSolve`'s answer, as MesaNet solves (von Oswald
    et al. 2025).

    For every ``t`` it solves ``(A_t + λI) x_t = q_t`` (``A_t = Σ γ k kᵀ``, the ridge ``λ`` constant in time) from
    ``x = 0`` and reads ``o_t = Σ γ (k_i·x_t) v_i``. In exact arithmetic ``D_k`` steps give the exact solve, so with
    :class:`Gates` it approaches Mesa (``named_layer("mesa")``, the constant-ridge exact solve) as ``steps`` grows. In
    floating point, rounding erodes the directions' conjugacy, so an ill-conditioned ``A_t + λI`` (a small ridge, large
    keys) can need more than ``D_k`` steps, and the output of a few steps can be further from Mesa's than an
    output of zeros.
    Raises ``ValueError`` unless ``ridge > 0``, ``TypeError``/``ValueError`` for a bad ``steps``.
    """

    steps: int = 8
    ridge: float = 1e-3

    def __post_init__(self):
        check_positive_int("steps", self.steps)
        check_positive_float("ridge", self.ridge)


OPTIMIZERS = OPTIMIZERS + (ImplicitStep, StepsPerToken, MiniBatchGD, MomentumSGD, ConjugateGradient)
