"""Choice 2 of a test-time regression layer: the function class ``M`` the memory is fitted in."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Linear",
    "LocalConstant",
    "LocalLinear",
    "MLP",
    "KernelRidge",
]


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


FUNCTION_CLASSES: tuple[type, ...] = (Linear, LocalConstant, LocalLinear)


@dataclass(frozen=True)
class MLP:
    """A two-layer MLP memory ``m(x) = W2ᵀ GELU(W1ᵀ x)`` (TTT-MLP, Titans), optionally ``x + LN(m(x))`` (TTT).

    Its weights ``(W1, W2)`` of shapes ``(B, H, D_k, D_h)`` and ``(B, H, D_h, D_v)`` come as the call's
    ``initial_state`` (a zero MLP has zero gradients). It is fitted by gradient methods only (:class:`OnlineSGD`,
    :class:`MiniBatchGD`, :class:`MomentumSGD`), with gradients from autodiff. ``layer_norm`` (no affine parameters)
    and ``residual`` (needs ``D_k == D_v``) are off by default.
    """

    layer_norm: bool = False
    residual: bool = False

    def __post_init__(self):
        for name in ("layer_norm", "residual"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected a bool, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class KernelRidge:
    """Kernel ridge regression, nonparametric: ``m_t(q) = κ(q, K_t) (Γ_t κ(K_t, K_t) + λ I)⁻¹ Γ_t V_t``.

    The minimiser of ``½ Σ γ_i ‖v_i − m(k_i)‖² + ½ λ ‖m‖²_κ`` over the kernel's function space (the representer
    theorem), refitted at every step from all stored pairs (Intention-kernelized, Skyformer and SOFT in Wang et al.
    2025's Figure 1). ``kernel``: ``"gaussian"`` ``exp(−scale ‖x − y‖²/2)`` or ``"exponential"`` ``exp(scale x·y)``.
    Solved in closed form only (:class:`ExactSolve` with ``ridge > 0``); ``O(T⁴)`` in all: a teaching tool.
    """

    kernel: str = "gaussian"

    def __post_init__(self):
        if self.kernel not in ("gaussian", "exponential"):
            raise ValueError(f"kernel: expected 'gaussian' or 'exponential', got {self.kernel!r}")


FUNCTION_CLASSES = FUNCTION_CLASSES + (MLP, KernelRidge)
