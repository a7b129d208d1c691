"""The dual form of linear layers trained by gradient descent (Irie, Csordás, Schmidhuber 2022, [irie2022dual]).

A linear layer ``y = W x`` trained by plain SGD on layer inputs ``x_t`` with errors ``e_t = −η ∂L/∂y_t`` ends at

    W_T = W_0 + Σ_t e_t x_tᵀ,       so for any test input x:       W_T x = W_0 x + Σ_t e_t (x_tᵀ x).

The right-hand side is unnormalised dot attention: the keys are the training inputs the layer saw, the values are
the errors, the query is the test input. Every ``nn.Linear`` of a network is such a memory, with its own keys (its
inputs as computed at training time). This module

* records the keys ``x_t`` and the output gradients of chosen ``nn.Linear`` layers while a model trains
  (:class:`DualFormRecorder`), in buffers whose size is fixed and printed up front;
* evaluates the dual form (:func:`dual_output`, :func:`dual_linear`, :meth:`DualFormRecorder.dual`), which equals the
  primal output for ``torch.optim.SGD``, with or without momentum (values rescaled, see :func:`momentum_rescale`),
  Nesterov momentum and weight decay (decayed attention);
* refuses optimisers whose update is not a sum of rank-one terms ``e_t x_tᵀ`` (Adam, ...), or, with
  ``allow_inexact=True``, records the naive SGD dual with a warning so that the gap can be measured;
* scores stored training patterns for a test input (:func:`spotlight_scores`, :func:`top_patterns`,
  :func:`class_votes`), as in the paper's spotlight figures.

Optimiser algebra (``torch.optim.SGD``, coupled weight decay λ, momentum μ, dampening 0): with ``G_t`` the gradient
of the loss with respect to ``W`` at step t, PyTorch applies ``buf_t = μ buf_{t−1} + G_t + λ W_{t−1}`` and
``W_t = W_{t−1} − η_t buf_t`` (Nesterov: ``W_t = W_{t−1} − η_t (G_t + λ W_{t−1} + μ buf_t)``). This is linear in
``(W, buf)``, so ``W_T = a W_0 + c buf_0 + Σ_t ρ_t G_t`` with scalar coefficients found by running the recurrence
backwards (:meth:`LinearMemory.coefficients`). For plain SGD ``ρ_t = −η_t``; with constant momentum
``ρ_t = −η (1 − μ^{T−t+1}) / (1 − μ)``; with weight decay ``ρ_t`` and ``a`` carry powers of ``(1 − ηλ)``.

The package holds three modules: :mod:`.maths` (the pure functions), :mod:`.memory` (the record of one layer and
its readers) and :mod:`.recorder` (the hooks).
"""

from ttr_edu.dual_form.maths import InexactDualWarning, class_votes, dual_output, momentum_rescale
from ttr_edu.dual_form.memory import LinearMemory, TopPatterns, dual_linear, spotlight_scores, top_patterns
from ttr_edu.dual_form.recorder import DualFormRecorder

__all__ = [
    "DualFormRecorder",
    "InexactDualWarning",
    "LinearMemory",
    "TopPatterns",
    "class_votes",
    "dual_linear",
    "dual_output",
    "momentum_rescale",
    "spotlight_scores",
    "top_patterns",
]
