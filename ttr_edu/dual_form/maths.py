"""The dual form's maths as pure functions (Irie, Csordás, Schmidhuber 2022, [irie2022dual]).

A linear layer ``y = W x`` trained by plain SGD on layer inputs ``x_t`` with errors ``e_t = −η ∂L/∂y_t`` ends at
``W_T x = W_0 x + Σ_t e_t (x_tᵀ x)``: unnormalised dot attention over the training patterns. See
:mod:`ttr_edu.dual_form` for the whole story; the record of a layer is :mod:`.memory`, the hooks :mod:`.recorder`.
"""

from __future__ import annotations

import torch

from ttr_edu._internal.validation import Dims, check_allocation, check_positive_int, check_same_device, guarded

__all__ = ["InexactDualWarning", "dual_output", "momentum_rescale", "class_votes"]


class InexactDualWarning(UserWarning):
    """The recorded optimiser does not update weights by ``Σ e_t x_tᵀ``: the 'dual' is not the model's output."""


@guarded
def dual_output(W0: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """The dual form of a linear layer: ``W₀ x + Σ_t e_t (x_tᵀ x)`` for each query row x.

    Args:
        W0: initial weight, ``(D_out, D_in)``.
        keys: training inputs ``x_t``, ``(N, D_in)``; any floating dtype (fp16 keys are upcast).
        values: errors ``e_t = −η ∂L/∂y_t`` (rescaled for momentum / weight decay), ``(N, D_out)``.
        query: test inputs, ``(Q, D_in)``.

    Returns:
        ``(Q, D_out)`` in the dtype of ``values``: ``query W₀ᵀ + (query keysᵀ) values``.

    Raises:
        TypeError: a non-floating tensor. ValueError: disagreeing sizes, or tensors on different devices.

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual], the dual form of a linear layer.
    """
    dims = Dims()
    dims.bind("W0", W0, ("D_out", "D_in"))
    dims.bind("keys", keys, ("N", "D_in"))
    dims.bind("values", values, ("N", "D_out"))
    dims.bind("query", query, ("Q", "D_in"))
    check_same_device(W0=W0, keys=keys, values=values, query=query)
    dtype = values.dtype
    query = query.to(dtype)
    scores = query @ keys.to(dtype).T  # (Q, N): unnormalised attention x_tᵀ x
    return query @ W0.to(dtype).T + scores @ values  # (Q, D_out)


@guarded
def momentum_rescale(momentum: float, num_steps: int) -> torch.Tensor:
    """How much SGD with momentum μ scales the value of step t after T steps: ``(1 − μ^{T−t+1}) / (1 − μ)``.

    With momentum, the gradient of step t keeps acting on every later step with weight μ^{s−t}, so by step T it has
    moved the weights by ``η Σ_{s=t..T} μ^{s−t}`` times itself (dampening 0, no weight decay). ``μ = 0`` gives ones.

    Args:
        momentum: μ in ``[0, 1)``.
        num_steps: T, a positive int.

    Returns:
        ``(T,)`` float64, entry ``t − 1`` for step ``t = 1..T``.

    Raises:
        TypeError / ValueError: μ not a number in ``[0, 1)``, T not a positive int.

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual], the dual form with momentum.
    """
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(f"momentum: expected a number in [0, 1), got {type(momentum).__name__} {momentum!r}")
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum: expected a number in [0, 1), got {momentum}")
    check_positive_int("num_steps", num_steps)
    check_allocation("num_steps", (num_steps,), dtype=torch.float64)
    t = torch.arange(1, num_steps + 1, dtype=torch.float64)
    if momentum == 0.0:
        return torch.ones(num_steps, dtype=torch.float64)
    return (1.0 - momentum ** (num_steps - t + 1)) / (1.0 - momentum)


@guarded
def class_votes(scores: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The per-class 'vote': the sum of the spotlight scores of the training patterns of each class.

    Args:
        scores: ``(Q, N)`` scores of N stored patterns for Q test inputs (e.g. :func:`spotlight_scores`).
        labels: ``(N,)`` integer class of each pattern, in ``[0, num_classes)``.
        num_classes: C.

    Returns:
        ``(Q, C)`` in the dtype of ``scores``: entry ``[q, c] = Σ_{t: label_t = c} scores[q, t]``.

    Raises:
        TypeError: ``labels`` not an integer tensor. ValueError: shapes disagree, or a label outside ``[0, C)``
        (unlabelled patterns are stored with label −1: annotate the recording to use votes).

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual], the class vote of the spotlight analysis.
    """
    dims = Dims()
    dims.bind("scores", scores, ("Q", "N"))
    check_positive_int("num_classes", num_classes)
    if not _is_integer_tensor(labels):
        raise TypeError(f"labels: expected an integer torch.Tensor of shape (N,), got {_describe(labels)}")
    if labels.shape != (dims["N"],):
        raise ValueError(f"labels: expected shape (N,) = ({dims['N']},), got {tuple(labels.shape)}")
    check_same_device(scores=scores, labels=labels)
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"labels: expected classes in [0, {num_classes}), got values from {labels.min().item()} to "
            f"{labels.max().item()} (−1 marks an unlabelled pattern: pass labels to DualFormRecorder.annotate)"
        )
    check_allocation("num_classes", (scores.shape[0], num_classes), dtype=scores.dtype, device=scores.device)
    votes = scores.new_zeros(scores.shape[0], num_classes)
    return votes.index_add_(1, labels.long(), scores)  # (Q, C)


def _is_integer_tensor(x) -> bool:
    """An integer tensor; bool is refused: a True/False mask passed as labels would vote for classes 0 and 1."""
    return isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {_dtype_name(x.dtype)}"
    return f"{type(x).__name__}"
