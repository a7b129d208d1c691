"""Test-time regression (Wang, Shi, Fox 2025): a sequence layer is a regression solved at test time.

A layer *memorises* its context by fitting a function ``m`` to the key-value pairs seen so far and *retrieves* by
evaluating it at the query (Wang, Shi, Fox 2025, eq. 1-2)::

    m_t = argmin_{m ∈ M}  ½ Σ_{i≤t} γ_i^{(t)} ‖v_i − m(k_i)‖²          y_t = m_t(q_t)

Three independent choices make a layer, and :class:`TestTimeRegression` takes exactly these three:

* ``weights``, the regression weights ``γ_i^{(t)}``: :class:`Uniform` (1), :class:`ExponentialDecay` (``γ^{t−i}``),
  data-dependent :class:`Gates` (``Π_{j=i+1..t} exp(g_j)``, ``g`` the per-token log decay) or a
  :class:`SlidingWindow` (1 for the last ``w`` pairs, 0 before);
* ``function_class``, the family ``M``: parametric :class:`Linear` (``m(x) = Sᵀx``) or :class:`MLP` (a two-layer
  memory), or nonparametric :class:`LocalConstant` (a kernel smoother, Nadaraya–Watson), :class:`LocalLinear` (a
  kernel-weighted linear fit around each query) or :class:`KernelRidge` (kernel ridge regression);
* ``optimizer``, how the regression is solved: :class:`ExactSolve` (closed form, with a ridge),
  :class:`RecursiveLeastSquares` (Sherman–Morrison; the exact answer with uniform weights, forgetting-factor RLS
  with decaying ones, whose ridge fades), :class:`ConjugateGradient`
  (an iterative approach to the exact answer), :class:`GradientStep` (one gradient step from zero),
  :class:`OnlineSGD` (one step of size ``β_t`` per new pair), :class:`ImplicitStep` (the proximal step),
  :class:`StepsPerToken` (several pairs per token), :class:`MiniBatchGD` (gradients at a mini-batch's start),
  :class:`MomentumSGD` (momentum and weight decay) or :class:`MultiPassSGD` (several online passes over the
  prefix).

The package holds one choice per module: :mod:`.weights`, :mod:`.function_classes`, :mod:`.optimizers`, the solvers
(:mod:`.linear`, :mod:`.deep` for gradients by autodiff, :mod:`.local`) and the layer (:mod:`.layer`).

The named layers of the field are points in this space (:data:`NAMED_LAYERS`)::

    linear attention        Uniform  × Linear        × GradientStep      (covariance ignored: Σ k kᵀ ≈ I)
    gated linear attention  Gates    × Linear        × GradientStep
    DeltaNet                Uniform  × Linear        × OnlineSGD
    gated DeltaNet          Gates    × Linear        × OnlineSGD         (Figure 1 of the paper: SGD + L2)
    Longhorn                Uniform  × Linear        × ImplicitStep
    DeltaProduct            Uniform  × Linear        × StepsPerToken     (gated: Gates)
    TTT-Linear / TTT-MLP    Uniform  × Linear / MLP  × MiniBatchGD
    Titans                  Uniform  × MLP           × MomentumSGD       (forgetting is the weight decay)
    RLS                     Uniform  × Linear        × RecursiveLeastSquares (or ExactSolve)
    Mesa                    Gates    × Linear        × ExactSolve        (constant ridge; MesaNet's solver: CG)
    softmax attention       Uniform  × LocalConstant × ExactSolve        (Nadaraya–Watson, kernel exp(s q·k))
    local linear attention  Uniform  × LocalLinear   × ExactSolve
    kernel ridge regression Uniform  × KernelRidge   × ExactSolve

In this project "RLS" names the ungated exact ridge regression and "Mesa" the gated one with a constant ridge,
``S_t = (Σ γ k kᵀ + λI)⁻¹ Σ γ k vᵀ`` (MesaNet, von Oswald et al. 2025 eq. 6; ``ops.rls_recurrent(g=…)``).
``Gates × Linear × RecursiveLeastSquares`` is something else: classical forgetting-factor RLS, whose ridge fades
with the data (``(Σ γ k kᵀ + γ_0^{(t)} λ I)⁻¹``), so it drifts from Mesa and can go singular in fp32.

The generic path here is written from the objective above, not from the specialised ops in :mod:`ttr_edu.ops`;
the tests prove each named layer equals its op. It explains the ops and is never called by a layer
(:mod:`ttr_edu.layers` calls the ops; CONTRIBUTING.md, "Which implementation a layer calls"). Tensors follow the
flash-linear-attention layout: ``q, k`` are ``(B, T, H, D_k)``, ``v`` is ``(B, T, H, D_v)``, ``beta`` and ``g`` are
``(B, T, H)``, a state ``S`` is ``(B, H, D_k, D_v)`` (the papers' fast weight is ``W = Sᵀ``) and the query is scaled
by ``scale`` (default ``D_k ** -0.5``). The maths runs in fp32 (fp64 for fp64 inputs) and ``o`` has the dtype of ``q``.

Ridge terms. The key covariance ``Σ γ k kᵀ`` is singular while fewer than ``D_k`` keys have been seen and
ill-conditioned when keys are nearly collinear. Every optimiser that inverts it adds ``λ I`` (``ridge > 0``), which
makes the system positive definite: the answer is then the ridge-regression solution, finite for any input.
A ridge ``λ ≤ 0`` where an inverse is needed raises ``ValueError``.
"""

from .function_classes import MLP, KernelRidge, Linear, LocalConstant, LocalLinear
from .layer import NAMED_LAYERS, TestTimeRegression, named_layer
from .linear import conjugate_gradient
from .optimizers import (
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
from .weights import ExponentialDecay, Gates, SlidingWindow, Uniform, decayed_cumsum, regression_weights

__all__ = [
    "Uniform",
    "ExponentialDecay",
    "Gates",
    "SlidingWindow",
    "Linear",
    "LocalConstant",
    "LocalLinear",
    "ExactSolve",
    "RecursiveLeastSquares",
    "GradientStep",
    "OnlineSGD",
    "MultiPassSGD",
    "MLP",
    "KernelRidge",
    "ImplicitStep",
    "StepsPerToken",
    "MiniBatchGD",
    "MomentumSGD",
    "ConjugateGradient",
    "conjugate_gradient",
    "TestTimeRegression",
    "regression_weights",
    "decayed_cumsum",
    "NAMED_LAYERS",
    "named_layer",
]
