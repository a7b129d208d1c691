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
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ttr_edu._validation import Dims, check_positive_int, check_same_device, check_tensor

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


class InexactDualWarning(UserWarning):
    """The recorded optimiser does not update weights by ``Σ e_t x_tᵀ``: the 'dual' is not the model's output."""


# ----------------------------------------------------------------------------------------------------------------
# The maths, as pure functions
# ----------------------------------------------------------------------------------------------------------------


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
    t = torch.arange(1, num_steps + 1, dtype=torch.float64)
    if momentum == 0.0:
        return torch.ones(num_steps, dtype=torch.float64)
    return (1.0 - momentum ** (num_steps - t + 1)) / (1.0 - momentum)


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
    votes = scores.new_zeros(scores.shape[0], num_classes)
    return votes.index_add_(1, labels.long(), scores)  # (Q, C)


# ----------------------------------------------------------------------------------------------------------------
# The memory of one recorded layer
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Update:
    """One optimiser step applied to a parameter: its step number and the SGD hyper-parameters then in force."""

    step: int
    lr: float
    momentum: float
    weight_decay: float
    nesterov: bool

    def matrices(self) -> tuple[tuple[tuple[float, float], tuple[float, float]], tuple[float, float]]:
        """``A, u`` with ``(W_t, buf_t) = A (W_{t−1}, buf_{t−1}) + u G_t`` (see the module docstring)."""
        eta, mu, lam = self.lr, self.momentum, self.weight_decay
        if self.nesterov:  # W_t = W − η((1+μ)(G + λW) + μ² buf)
            A = ((1.0 - eta * (1.0 + mu) * lam, -eta * mu * mu), (lam, mu))
            return A, (-eta * (1.0 + mu), 1.0)
        A = ((1.0 - eta * lam, -eta * mu), (lam, mu))  # W_t = W − η(μ buf + G + λW)
        return A, (-eta, 1.0)


def _coefficients(updates: Sequence[_Update]) -> tuple[float, float, list[float]]:
    """``a, c, ρ`` with ``W_T = a W_0 + c buf_0 + Σ_t ρ_t G_t`` after the given updates (backward recursion)."""
    r_w, r_b = 1.0, 0.0  # row vector picking W_T out of (W_T, buf_T)
    rho = [0.0] * len(updates)
    for i in range(len(updates) - 1, -1, -1):
        (A, u) = updates[i].matrices()
        rho[i] = r_w * u[0] + r_b * u[1]
        r_w, r_b = r_w * A[0][0] + r_b * A[1][0], r_w * A[0][1] + r_b * A[1][1]
    return r_w, r_b, rho


class LinearMemory:
    """The key-value memory of one recorded ``nn.Linear``: keys ``x_t``, output gradients, and how SGD used them.

    Built and filled by :class:`DualFormRecorder`; read it with :func:`dual_linear`, :func:`spotlight_scores`,
    :func:`top_patterns`. Buffers are allocated once, for ``capacity`` patterns; the first ``num_patterns`` rows
    are filled, in step order.

    Attributes:
        name: the layer's name in the model. ``d_in``, ``d_out``: its widths.
        W0, b0: the weight ``(D_out, D_in)`` and bias ``(D_out,)`` (or None) when recording began.
        exact: False when the optimiser is not SGD (recorded with ``allow_inexact=True``): the dual is then the
            naive SGD dual with the optimiser's learning rate, not the model's output.
    """

    def __init__(self, name: str, layer: nn.Linear, optimizer_state: dict, max_steps: int, capacity: int,
                 key_dtype: torch.dtype, exact: bool, verify: bool) -> None:
        weight = layer.weight
        self.name, self.d_in, self.d_out, self.capacity, self.exact = name, layer.in_features, layer.out_features, \
            capacity, exact
        self.W0 = weight.detach().clone()
        self.b0 = None if layer.bias is None else layer.bias.detach().clone()
        # A momentum buffer left by earlier steps keeps acting on the weights: it is part of the initial term.
        self.W_buf0 = _momentum_buffer(optimizer_state.get(weight, {}), weight)
        self.b_buf0 = None if layer.bias is None else _momentum_buffer(optimizer_state.get(layer.bias, {}), layer.bias)
        device, dtype = weight.device, weight.dtype
        self.keys_buffer = torch.empty(capacity, self.d_in, dtype=key_dtype, device=device)  # (capacity, D_in)
        self.grads_buffer = torch.empty(capacity, self.d_out, dtype=dtype, device=device)  # (capacity, D_out): ∂L/∂y
        # rows: label, sample id; −1 until annotate() says otherwise (the step of a pattern follows from update_ends)
        self.meta_buffer = torch.full((2, capacity), -1, dtype=torch.int64, device=device)
        self.buffers = [self.keys_buffer, self.grads_buffer, self.meta_buffer]
        if verify:  # what _verify_updates needs: x_tᵀr per pattern, [W.grad b.grad] (r; r_b) per update
            probe = torch.randn(self.d_in + 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            self.probe, self.probe_bias = probe[:-1].to(device=device, dtype=dtype), probe[-1].item()
            self.probed_keys_buffer = torch.empty(capacity, dtype=dtype, device=device)
            self.probed_grad_buffer = torch.empty(max_steps, self.d_out, dtype=dtype, device=device)
            self.probe_has_bias: list[bool] = []
            self.buffers += [self.probed_keys_buffer, self.probed_grad_buffer]
        self.verify = verify
        self.num_patterns = 0
        self.weight_updates: list[_Update] = []
        self.bias_updates: list[_Update] = []
        self.update_ends: list[int] = []  # patterns of weight update i are rows [update_ends[i-1], update_ends[i])
        self.verified_updates = 0
        self._cache: dict = {}  # coefficients by step, and "steps"; cleared at every commit

    @property
    def nbytes(self) -> int:
        """Bytes held by the recording buffers (allocated once, at full capacity)."""
        return sum(b.numel() * b.element_size() for b in self.buffers)

    @property
    def num_steps(self) -> int:
        """The last optimiser step that updated this layer's weight (0 before any)."""
        return self.weight_updates[-1].step if self.weight_updates else 0

    @property
    def keys(self) -> torch.Tensor:
        """``(N, D_in)`` the stored training inputs ``x_t`` (in the key dtype)."""
        return self.keys_buffer[: self.num_patterns]

    @property
    def steps(self) -> torch.Tensor:
        """``(N,)`` int64: the optimiser step (1-based) each pattern was used in."""
        if "steps" not in self._cache:
            ends = torch.tensor([0] + self.update_ends, dtype=torch.int64)
            numbers = torch.tensor([u.step for u in self.weight_updates], dtype=torch.int64)
            self._cache["steps"] = numbers.repeat_interleave(ends.diff()).to(self.meta_buffer.device)
        return self._cache["steps"]

    @property
    def labels(self) -> torch.Tensor:
        """``(N,)`` int64: the label given to :meth:`DualFormRecorder.annotate`, −1 when none was given."""
        return self.meta_buffer[0, : self.num_patterns]

    @property
    def sample_ids(self) -> torch.Tensor:
        """``(N,)`` int64: the sample id given to :meth:`DualFormRecorder.annotate`, −1 when none was given."""
        return self.meta_buffer[1, : self.num_patterns]

    def _resolve_step(self, at_step: int | None) -> int:
        if at_step is None:
            return self.num_steps
        if isinstance(at_step, bool) or not isinstance(at_step, int):
            raise TypeError(f"at_step: expected an int or None, got {type(at_step).__name__} {at_step!r}")
        if not 0 <= at_step <= self.num_steps:
            raise ValueError(f"at_step: expected 0 <= at_step <= {self.num_steps} (steps recorded for "
                             f"{self.name}), got {at_step}")
        return at_step

    def coefficients(self, at_step: int | None = None) -> dict[str, torch.Tensor | float]:
        """The scalars of ``W_s = a W_0 + c buf_0 + Σ_{t≤s} ρ_t G_t`` after step ``s = at_step`` (default: last).

        Returns a dict with ``a``, ``c`` (floats), ``rho`` ``(S,)`` float64 over the weight's updates up to s,
        ``update_steps`` ``(S,)`` their step numbers, ``value_scale`` = ``ρ_t / (−η_t)`` (1 for plain SGD,
        :func:`momentum_rescale` for momentum), and the same for the bias as ``bias_a``, ``bias_c``, ``bias_rho``,
        ``bias_update_steps``.
        """
        s = self._resolve_step(at_step)
        if s not in self._cache:
            w_updates = [u for u in self.weight_updates if u.step <= s]
            b_updates = [u for u in self.bias_updates if u.step <= s]
            a, c, rho = _coefficients(w_updates)
            ba, bc, brho = _coefficients(b_updates)
            self._cache[s] = {
                "a": a, "c": c, "rho": torch.tensor(rho, dtype=torch.float64),
                "update_steps": torch.tensor([u.step for u in w_updates], dtype=torch.int64),
                "value_scale": torch.tensor([r / -u.lr for r, u in zip(rho, w_updates)], dtype=torch.float64),
                "bias_a": ba, "bias_c": bc, "bias_rho": torch.tensor(brho, dtype=torch.float64),
                "bias_update_steps": torch.tensor([u.step for u in b_updates], dtype=torch.int64),
            }
        return self._cache[s]

    def _per_pattern(self, rho: torch.Tensor, update_steps: torch.Tensor, n: int) -> torch.Tensor:
        """Spread per-update coefficients onto the first ``n`` patterns, by each pattern's step."""
        index = torch.searchsorted(update_steps, self.steps[:n].cpu())
        return rho[index].to(device=self.grads_buffer.device, dtype=self.grads_buffer.dtype)  # (n,)

    def patterns_until(self, at_step: int | None = None) -> int:
        """How many stored patterns belong to steps ``≤ at_step`` (patterns are stored in step order)."""
        s = self._resolve_step(at_step)
        return int(torch.searchsorted(self.steps, torch.tensor(s, device=self.steps.device), right=True).item())

    def values(self, at_step: int | None = None) -> torch.Tensor:
        """``(N_s, D_out)``: the values ``e_t = ρ_t ∂L/∂y_t`` of the patterns up to ``at_step``.

        For plain SGD ``ρ_t = −η_t``: the paper's ``e_t = −η ∂L/∂y_t``. Momentum and weight decay rescale them.
        """
        coef = self.coefficients(at_step)
        n = self.patterns_until(at_step)
        return self.grads_buffer[:n] * self._per_pattern(coef["rho"], coef["update_steps"], n)[:, None]

    def bias_value_sum(self, at_step: int | None = None) -> torch.Tensor | None:
        """``(D_out,)``: ``Σ_t e_t`` for the bias (a weight on a constant input 1), None for a layer without bias."""
        if self.b0 is None:
            return None
        coef = self.coefficients(at_step)
        n = self.patterns_until(at_step)
        if not len(coef["bias_update_steps"]) or n == 0:
            return torch.zeros_like(self.b0)
        scale = self._per_pattern(coef["bias_rho"], coef["bias_update_steps"], n)
        return scale @ self.grads_buffer[:n]

    def describe(self) -> str:
        """One line: name, widths, capacity, dtypes and bytes of the buffers."""
        keys_mb = self.keys_buffer.numel() * self.keys_buffer.element_size() / 1e6
        values_mb = self.grads_buffer.numel() * self.grads_buffer.element_size() / 1e6
        return (f"{self.name}: Linear({self.d_in}→{self.d_out}), {self.capacity:,} patterns: keys {keys_mb:.1f} MB "
                f"({_dtype_name(self.keys_buffer.dtype)}), values {values_mb:.1f} MB "
                f"({_dtype_name(self.grads_buffer.dtype)}), steps/labels/ids{' and checks' if self.verify else ''} "
                f"{self.nbytes / 1e6 - keys_mb - values_mb:.1f} MB")

    def __repr__(self) -> str:
        return f"LinearMemory({self.name}, Linear({self.d_in}→{self.d_out}), {self.num_patterns:,} patterns, " \
               f"{self.num_steps} steps{'' if self.exact else ', INEXACT'})"

    # -- filled by the recorder --------------------------------------------------------------------------------
    def _write_keys(self, x: torch.Tensor, start: int) -> bool:
        """Store the inputs of one forward call at rows ``start..`` (made final, or dropped, at the step).

        Returns False, storing nothing, when they do not fit: that is an error only if the call gets a gradient
        and so becomes part of a step (a forward pass for evaluation after training must not fail).
        """
        stop = start + x.shape[0]
        if stop > self.capacity:
            return False
        self.keys_buffer[start:stop] = x
        if self.verify:
            torch.mv(x, self.probe, out=self.probed_keys_buffer[start:stop])
        return True

    def _commit(self, slots: list[list], weight: torch.Tensor, bias: torch.Tensor | None,
                labels: torch.Tensor | None, sample_ids: torch.Tensor | None,
                weight_update: _Update | None, bias_update: _Update | None) -> None:
        """Make the step's patterns final: drop forward calls that got no gradient, then write the step's record."""
        write = self.num_patterns
        for start, n, has_grad, _, stored in slots:
            if not has_grad:
                continue
            if not stored:
                step = "?" if weight_update is None else weight_update.step
                raise RuntimeError(
                    f"{self.name}: the recording is full ({self.capacity:,} patterns = max_steps × patterns_per_step);"
                    f" step {step} brings {sum(s[1] for s in slots if s[2])} patterns, "
                    f"{self.capacity - self.num_patterns} fit. Recording stops here rather than grow without bound: create the recorder with a larger "
                    "max_steps or patterns_per_step, or close() it before training on."
                )
            if start != write:  # an earlier call of this step got no gradient: close the gap
                self.keys_buffer[write:write + n] = self.keys_buffer[start:start + n].clone()
                self.grads_buffer[write:write + n] = self.grads_buffer[start:start + n].clone()
                if self.verify:
                    self.probed_keys_buffer[write:write + n] = self.probed_keys_buffer[start:start + n].clone()
            write += n
        n = write - self.num_patterns
        if n:
            if weight_update is None:
                raise RuntimeError(f"{self.name}: {n} patterns got gradients but {self.name}.weight.grad is None")
            if labels is not None:
                self.meta_buffer[0, self.num_patterns:write] = labels
            if sample_ids is not None:
                self.meta_buffer[1, self.num_patterns:write] = sample_ids
        if weight_update is not None:
            if self.verify:  # [W.grad b.grad] (r; r_b): one product checks both
                probed = self.probed_grad_buffer[len(self.weight_updates)]
                has_bias = bias is not None and bias.grad is not None
                if has_bias:
                    torch.addmv(bias.grad, weight.grad, self.probe, beta=self.probe_bias, out=probed)
                else:
                    torch.mv(weight.grad, self.probe, out=probed)
                self.probe_has_bias.append(has_bias)
            self.weight_updates.append(weight_update)
            self.update_ends.append(write)
        if bias_update is not None:
            self.bias_updates.append(bias_update)
        self.num_patterns = write
        self._cache.clear()

    def _verify_updates(self) -> None:
        """Check every new update: ``W.grad r + b.grad r_b == Σ_t g_t (x_tᵀ r + r_b)`` for a fixed random (r, r_b).

        Done in one vectorised pass when the record is read. The tolerance is ``sqrt(eps)`` of the weight's dtype
        relative to Cauchy–Schwarz bounds of each side: rounding stays far below it, and any real change of the
        gradient (clipping, accumulation over steps) goes far above.
        """
        first, last = self.verified_updates, len(self.weight_updates)
        if not self.verify or first == last:
            return
        p0 = self.update_ends[first - 1] if first else 0
        p1 = self.update_ends[last - 1]
        ends = torch.tensor(self.update_ends[first:last], device=self.meta_buffer.device)
        segment = torch.searchsorted(ends, torch.arange(p0, p1, device=ends.device), right=True)  # (n,) update index
        grads = self.grads_buffer[p0:p1]  # (n, D_out)
        has_bias = torch.tensor(self.probe_has_bias[first:last], device=ends.device)  # (U,)
        projected = self.probed_keys_buffer[p0:p1] + self.probe_bias * has_bias[segment]  # (n,): x_tᵀr + r_b
        U, dtype = last - first, grads.dtype
        want = grads.new_zeros(U, self.d_out).index_add_(0, segment, grads * projected[:, None])  # (U, D_out)
        grads_sq = grads.new_zeros(U).index_add_(0, segment, grads.pow(2).sum(1))
        proj_sq = grads.new_zeros(U).index_add_(0, segment, projected.pow(2))
        got = self.probed_grad_buffer[first:last]  # (U, D_out)
        probe_norm = (self.probe.norm() ** 2 + self.probe_bias ** 2).sqrt()
        # relative to Cauchy–Schwarz bounds: ‖Σ_t g_t p_t‖ ≤ ‖G‖ ‖p‖ and ‖[W.grad b.grad] (r; r_b)‖ ≤ ‖...‖ ‖(r; r_b)‖
        gap = (got - want).norm(dim=1) / (grads_sq.sqrt() * proj_sq.sqrt() + got.norm(dim=1) * probe_norm)
        gap = gap.nan_to_num(0.0)  # (U,): 0/0 (no gradient at all) is agreement
        tol = math.sqrt(torch.finfo(dtype).eps)
        bad = (gap > tol).nonzero()
        if len(bad):
            i = bad[0].item()
            raise RuntimeError(
                f"{self.name}: at step {self.weight_updates[first + i].step} the gradient is not Σ_t ∂L/∂y_t x_tᵀ over "
                f"the patterns recorded in that step (relative gap {gap[i].item():.3g} > {tol:.1g}), so the dual "
                "form would be wrong. Common causes: gradient clipping or scaling, a missing optimizer.zero_grad(), "
                "a weight shared with another module, or a layer whose weight is used without calling the module. "
                "Pass verify=False to skip this check."
            )
        self.verified_updates = last


def _momentum_buffer(state: dict, param: torch.Tensor) -> torch.Tensor:
    buf = state.get("momentum_buffer")
    return torch.zeros_like(param.detach()) if buf is None else buf.detach().clone()


def _is_integer_tensor(x) -> bool:
    """An integer tensor; bool is refused: a True/False mask passed as labels would vote for classes 0 and 1."""
    return isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {_dtype_name(x.dtype)}"
    return f"{type(x).__name__}"


def _check_memory(memory) -> LinearMemory:
    if not isinstance(memory, LinearMemory):
        raise TypeError(f"memory: expected a LinearMemory (recorder.memory('<layer>')), got {type(memory).__name__}")
    return memory


def _check_query(memory: LinearMemory, query: torch.Tensor) -> None:
    check_tensor("query", query)
    if query.dim() != 2 or query.shape[1] != memory.d_in:
        raise ValueError(f"query: expected shape (Q, D_in) = (Q, {memory.d_in}) for layer {memory.name}, got "
                         f"{tuple(query.shape)}")
    check_same_device(query=query, keys=memory.keys_buffer)


# ----------------------------------------------------------------------------------------------------------------
# Reading a memory: dual forward and spotlights
# ----------------------------------------------------------------------------------------------------------------


def dual_linear(memory: LinearMemory, query: torch.Tensor, *, at_step: int | None = None) -> torch.Tensor:
    """The recorded layer's output in dual form: ``a W₀x + c buf₀x + Σ_t e_t (x_tᵀ x)`` (+ the bias terms).

    For plain SGD, ``a = 1, c = 0`` and this is the paper's ``W₀x + Σ_t e_t (x_tᵀ x)``; after ``at_step`` steps it
    equals the primal layer ``W_s x + b_s`` to rounding (fp64: relative error ~1e-15; fp32: ~1e-6).

    Args:
        memory: the layer's record, ``recorder.memory(name)``.
        query: test inputs of the layer, ``(Q, D_in)``, in the weight's dtype or any floating dtype.
        at_step: evaluate the layer as it was after this optimiser step (default: the last recorded).

    Returns:
        ``(Q, D_out)`` in the weight's dtype.

    Raises:
        TypeError: ``memory`` is not a LinearMemory; ``query`` is not floating. ValueError: ``query`` is not
        ``(Q, D_in)`` for this layer; ``at_step`` out of range. Warns :class:`InexactDualWarning` when the
        optimiser was not SGD.

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual], the dual form; momentum and weight decay by the SGD
    recurrence in the module docstring.
    """
    memory = _check_memory(memory)
    _check_query(memory, query)
    if not memory.exact:
        warnings.warn(f"{memory.name}: recorded under a non-SGD optimiser; this dual is the naive SGD dual and is not "
                      "the model's output", InexactDualWarning, stacklevel=2)
    coef = memory.coefficients(at_step)
    n = memory.patterns_until(at_step)
    dtype = memory.grads_buffer.dtype
    W_initial = coef["a"] * memory.W0 + coef["c"] * memory.W_buf0  # (D_out, D_in)
    out = dual_output(W_initial, memory.keys_buffer[:n], memory.values(at_step), query.to(dtype))  # (Q, D_out)
    if memory.b0 is not None:
        out = out + (coef["bias_a"] * memory.b0 + coef["bias_c"] * memory.b_buf0 + memory.bias_value_sum(at_step))
    return out


def spotlight_scores(memory: LinearMemory, query: torch.Tensor, *, at_step: int | None = None) -> torch.Tensor:
    """The spotlight score ``|x_tᵀ x|`` of every stored training pattern for each test input.

    Args:
        memory: the layer's record. query: ``(Q, D_in)`` test inputs of that layer.
        at_step: only patterns of steps up to this one (default: all).

    Returns:
        ``(Q, N_s)`` in the weight's dtype (fp16 keys are upcast).

    Raises:
        TypeError / ValueError: as :func:`dual_linear`.

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual], the spotlight analysis.
    """
    memory = _check_memory(memory)
    _check_query(memory, query)
    n = memory.patterns_until(at_step)
    dtype = memory.grads_buffer.dtype
    return (query.to(dtype) @ memory.keys_buffer[:n].to(dtype).T).abs()  # (Q, N_s)


@dataclass(frozen=True)
class TopPatterns:
    """The k stored patterns with the highest spotlight score, per test input; every field is ``(Q, k)``.

    ``index`` points into the memory's patterns; ``step`` is the optimiser step that used the pattern; ``label``
    and ``sample_id`` are what :meth:`DualFormRecorder.annotate` was given (−1 when nothing was).
    """

    score: torch.Tensor
    index: torch.Tensor
    step: torch.Tensor
    label: torch.Tensor
    sample_id: torch.Tensor


def top_patterns(memory: LinearMemory, query: torch.Tensor, k: int, *, at_step: int | None = None,
                 distinct_samples: bool = False) -> TopPatterns:
    """The top-k training patterns of a layer for each test input, by spotlight score, with labels and steps.

    SGD sees a training image many times, and every time is its own pattern (for the first layer even with the
    same key, so the same score). ``distinct_samples=True`` keeps only the best-scoring pattern of each sample id,
    so that a gallery shows k different training images.

    Args:
        memory: the layer's record. query: ``(Q, D_in)``. k: how many, ``1 <= k <= N``.
        at_step: only patterns of steps up to this one (default: all).
        distinct_samples: at most one pattern per sample id (needs ``annotate(sample_ids=...)``); among patterns of
            one sample with equal scores, the earliest is kept.

    Returns:
        :class:`TopPatterns`, each field ``(Q, k)``, highest score first.

    Raises:
        TypeError / ValueError: as :func:`spotlight_scores`; ``k`` not a positive int or larger than N (or than the
        number of distinct samples); ``distinct_samples`` with patterns that have no sample id.

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual], the spotlight figures.
    """
    scores = spotlight_scores(memory, query, at_step=at_step)
    check_positive_int("k", k)
    if k > scores.shape[1]:
        raise ValueError(f"k: expected at most N = {scores.shape[1]} (patterns stored for {memory.name}), got {k}")
    if not distinct_samples:
        score, index = scores.topk(k, dim=1)  # (Q, k)
    else:
        score, index = _top_distinct(scores, memory.sample_ids[: scores.shape[1]], k, memory.name)
    return TopPatterns(score=score, index=index, step=memory.steps[index], label=memory.labels[index],
                       sample_id=memory.sample_ids[index])


def _top_distinct(scores: torch.Tensor, sample_ids: torch.Tensor, k: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of each row of ``scores`` (Q, N) keeping the first pattern of each sample id in score order."""
    if sample_ids.numel() and sample_ids.min() < 0:
        raise ValueError(f"distinct_samples: some patterns of {name} have no sample id; pass sample_ids to "
                         "DualFormRecorder.annotate() while training, or use distinct_samples=False")
    _, inverse = torch.unique(sample_ids, return_inverse=True)  # (N,): sample id -> 0..S-1
    n_samples = int(inverse.max().item()) + 1 if inverse.numel() else 0
    if k > n_samples:
        raise ValueError(f"k: expected at most {n_samples} (distinct samples stored for {name}), got {k}")
    order = scores.argsort(dim=1, descending=True, stable=True)  # (Q, N)
    positions = torch.arange(order.shape[1], device=order.device).expand_as(order)
    first = torch.full((order.shape[0], n_samples), order.shape[1], device=order.device, dtype=order.dtype)
    first.scatter_reduce_(1, inverse[order], positions, reduce="amin")  # (Q, S): rank of each sample's best pattern
    best_ranks = first.sort(dim=1).values[:, :k]  # (Q, k)
    index = order.gather(1, best_ranks)
    return scores.gather(1, index), index


# ----------------------------------------------------------------------------------------------------------------
# Recording
# ----------------------------------------------------------------------------------------------------------------


class DualFormRecorder:
    """Record chosen ``nn.Linear`` layers of a model while it trains, to evaluate them in dual form.

    The recorder hooks the layers' forward passes (the input ``x_t`` is the key), their outputs' gradients
    (``∂L/∂y_t``, the value up to the step size) and the optimiser's ``step`` (which commits the step's patterns
    together with the learning rate, momentum and weight decay then in force). Buffers for
    ``max_steps × patterns_per_step`` patterns per layer are allocated at once and their size is printed, so that the
    cost is known before training starts; a step that would overflow them raises. Forward passes that get no
    gradient before the step (evaluation) are not recorded.

    Use it around an ordinary loop::

        recorder = DualFormRecorder(model, optimizer, ["fc1", "fc2"], max_steps=2000, patterns_per_step=32)
        for x, y in batches:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            recorder.annotate(labels=y)        # optional: labels / sample ids, for spotlights and votes
            optimizer.step()                   # the recorder commits here
        recorder.close()
        with recorder.dual():                  # every recorded layer now computes W₀x + Σ e_t (x_tᵀx)
            y_dual = model(x_test)

    Args:
        model: any ``nn.Module``.
        optimizer: the ``torch.optim.SGD`` training it (momentum, Nesterov and weight decay are represented
            exactly; dampening and ``maximize`` are refused). Any other optimiser raises, unless ``allow_inexact``.
        layers: names of the ``nn.Linear`` modules to record, as in ``model.named_modules()``.
        max_steps: at most this many optimiser steps are recorded.
        patterns_per_step: inputs a layer sees per step (batch size × tokens × calls per step).
        key_dtype: dtype in which keys are stored (default: the weight's). ``torch.float16`` halves their memory;
            the dual output is then approximate (relative error ~1e-3) and spotlights stay meaningful.
        allow_inexact: record under a non-SGD optimiser anyway, with an :class:`InexactDualWarning`, treating each
            update as an SGD step with the optimiser's learning rate (to measure how wrong that is).
        verify: check, for every step, that each recorded layer's gradient ``[W.grad b.grad]`` is
            ``Σ_t ∂L/∂y_t [x_tᵀ 1]`` over the recorded patterns (through a fixed random projection saved at the
            step; the comparison runs vectorised when the record is read, see :meth:`check`). It catches gradient
            clipping, a missing ``zero_grad()``, shared weights and layers called around their hooks.
        verbose: print the memory cost when the buffers are allocated.

    Raises:
        TypeError: a layer is not ``nn.Linear``; ``layers`` is not a list of names; an unsupported optimiser without
            ``allow_inexact``; a non-floating ``key_dtype``.
        ValueError: an unknown layer name, a layer not optimised by ``optimizer`` or frozen, SGD with dampening or
            ``maximize``, a non-positive ``max_steps`` / ``patterns_per_step``.
        RuntimeError: during training, when the buffers are full or momentum changed; when a record is read, when
            a step's gradient was not the recorded sum (``verify``).

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual].
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, layers: Sequence[str], *, max_steps: int,
                 patterns_per_step: int, key_dtype: torch.dtype | None = None, allow_inexact: bool = False,
                 verify: bool = True, verbose: bool = True) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if isinstance(layers, str) or not isinstance(layers, Sequence) or not all(isinstance(n, str) for n in layers):
            raise TypeError(f"layers: expected a list of layer names such as ['fc1', 'fc2'], got {layers!r}")
        if not layers:
            raise ValueError("layers: expected at least one layer name, got an empty list")
        check_positive_int("max_steps", max_steps)
        check_positive_int("patterns_per_step", patterns_per_step)
        if key_dtype is not None and (not isinstance(key_dtype, torch.dtype) or not key_dtype.is_floating_point):
            raise TypeError(f"key_dtype: expected a floating torch.dtype such as torch.float16, got {key_dtype!r}")
        self.exact = self._check_optimizer(optimizer, allow_inexact)

        modules = dict(model.named_modules())
        self.model, self.optimizer, self.verify = model, optimizer, verify
        self.layers: dict[str, nn.Linear] = {}
        for name in layers:
            if name not in modules:
                linear = [n for n, m in modules.items() if isinstance(m, nn.Linear)]
                raise ValueError(f"layers: no module named {name!r} in the model; its nn.Linear layers are {linear}")
            layer = modules[name]
            if not isinstance(layer, nn.Linear):
                raise TypeError(f"layers: {name!r} is a {type(layer).__name__}; only nn.Linear layers can be "
                                "recorded (their update is Σ e_t x_tᵀ)")
            self._check_optimised(name, layer, optimizer)
            self.layers[name] = layer

        capacity = max_steps * patterns_per_step
        self.max_steps, self.patterns_per_step = max_steps, patterns_per_step
        self._memories = {
            name: LinearMemory(name, layer, optimizer.state, max_steps, capacity, key_dtype or layer.weight.dtype,
                               self.exact, verify)
            for name, layer in self.layers.items()
        }
        self.num_steps = 0
        # Forward calls of the current step, per layer: [first row, rows, got its gradient, still open, stored]. Keys
        # and gradients are written straight into the buffers; the step keeps those that got a gradient.
        self._slots: dict[str, list[list]] = {name: [] for name in self.layers}
        self._annotation: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)
        self._groups: dict[int, dict] = {}
        self._recording = True
        self._handles = [layer.register_forward_hook(self._forward_hook(name)) for name, layer in self.layers.items()]
        self._handles.append(optimizer.register_step_pre_hook(self._step_hook))
        if verbose:
            print(self.describe())

    # -- argument checks ---------------------------------------------------------------------------------------
    @staticmethod
    def _check_optimizer(optimizer: torch.optim.Optimizer, allow_inexact: bool) -> bool:
        if type(optimizer) is not torch.optim.SGD:
            why = (f"optimizer: {type(optimizer).__name__} does not update a weight by Σ_t e_t x_tᵀ (Adam and its kin "
                   "rescale every coordinate by running statistics of the gradients), so no exact dual form exists. "
                   "Only torch.optim.SGD (with momentum, Nesterov, weight decay) is represented exactly")
            if not allow_inexact:
                raise TypeError(why + "; pass allow_inexact=True to record the naive SGD dual and measure its error.")
            warnings.warn(why + "; recording the naive SGD dual (e_t = −lr ∂L/∂y_t), which is NOT the model's output.",
                          InexactDualWarning, stacklevel=3)
            return False
        for group in optimizer.param_groups:
            if group.get("maximize", False):
                raise ValueError("optimizer: SGD with maximize=True is not supported (the values would change sign)")
            if group.get("momentum", 0.0) and group.get("dampening", 0.0):
                raise ValueError(f"optimizer: SGD with dampening={group['dampening']} is not supported: PyTorch skips "
                                 "the dampening on the first step, which this recorder does not model; use dampening=0")
        return True

    @staticmethod
    def _check_optimised(name: str, layer: nn.Linear, optimizer: torch.optim.Optimizer) -> None:
        optimised = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = [("weight", layer.weight)] + ([] if layer.bias is None else [("bias", layer.bias)])
        for pname, p in params:
            if not p.requires_grad:
                raise ValueError(f"layers: {name}.{pname} does not require grad, so training never changes it; "
                                 "record only trained layers")
            if id(p) not in optimised:
                raise ValueError(f"layers: {name}.{pname} is not among the optimizer's parameters, so the recorder "
                                 "cannot know how it is updated")

    def describe(self) -> str:
        """The memory cost of the recording, layer by layer (printed when the recorder is created)."""
        total = self.nbytes
        lines = [f"DualFormRecorder: {len(self._memories)} layer(s) × up to {self.max_steps:,} steps × "
                 f"{self.patterns_per_step:,} patterns/step; buffers allocated now: {total / 1e6:.1f} MB"]
        lines += ["  " + m.describe() for m in self._memories.values()]
        if not self.exact:
            lines.append("  INEXACT: the optimiser is not SGD; the dual form will not equal the model's output")
        return "\n".join(lines)

    @property
    def nbytes(self) -> int:
        """Bytes held by all recording buffers."""
        return sum(m.nbytes for m in self._memories.values())

    @property
    def memories(self) -> dict[str, LinearMemory]:
        """Every recorded layer's record, by name (checked first: see :meth:`check`)."""
        self.check()
        return dict(self._memories)

    def memory(self, name: str) -> LinearMemory:
        """The record of layer ``name``, checked first (see :meth:`check`).

        Raises:
            KeyError: ``name`` was not recorded (the message lists the recorded layers).
            RuntimeError: a recorded gradient was not the sum over the recorded patterns (see :meth:`check`).
        """
        if name not in self._memories:
            raise KeyError(f"layer {name!r} was not recorded; recorded layers: {list(self._memories)}. Create the "
                           "DualFormRecorder with it in `layers` before training to evaluate its dual form")
        self._memories[name]._verify_updates()
        return self._memories[name]

    def check(self) -> None:
        """With ``verify``: check that every recorded step's weight gradient was ``Σ_t ∂L/∂y_t x_tᵀ``.

        The inputs of the check are saved at every step (two small products); the check itself runs here, in one
        vectorised pass over the steps not checked yet. Reading a record (:meth:`memory`, :meth:`dual`) calls it.

        Raises:
            RuntimeError: naming the layer and the first wrong step, and the likely causes.
        """
        for memory in self._memories.values():
            memory._verify_updates()

    def annotate(self, labels: torch.Tensor | None = None, sample_ids: torch.Tensor | None = None) -> None:
        """Attach labels and/or sample ids to the patterns of the current step (call before ``optimizer.step()``).

        Each is an integer tensor with one entry per pattern a recorded layer sees this step (for an MLP: the batch,
        ``(B,)``; for tokens, ``(B, T)`` flattened in the layer's order).

        Raises:
            TypeError: not an integer tensor. ValueError (at the step): the count differs from a layer's patterns.
        """
        for arg, value in (("labels", labels), ("sample_ids", sample_ids)):
            if value is not None and not _is_integer_tensor(value):
                raise TypeError(f"{arg}: expected an integer torch.Tensor, one entry per pattern, got "
                                f"{_describe(value)}")
        self._annotation = (None if labels is None else labels.detach().reshape(-1),
                            None if sample_ids is None else sample_ids.detach().reshape(-1))

    # -- hooks -------------------------------------------------------------------------------------------------
    def _forward_hook(self, name: str):
        memory = self._memories[name]
        slots = self._slots[name]

        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            if not self._recording or not torch.is_grad_enabled() or not output.requires_grad:
                return
            x = inputs[0].detach().reshape(-1, module.in_features)  # (n, D_in)
            start = slots[-1][0] + slots[-1][1] if slots else memory.num_patterns
            slot = [start, x.shape[0], False, True, memory._write_keys(x, start)]
            slots.append(slot)

            def save_grad(grad: torch.Tensor) -> None:
                if not slot[3] or not slot[4]:  # after its step was committed, or not stored (buffers full)
                    slot[2] = True
                    return
                rows = memory.grads_buffer[slot[0]:slot[0] + slot[1]]  # (n, D_out)
                grad = grad.detach().reshape(-1, module.out_features)
                rows.add_(grad) if slot[2] else rows.copy_(grad)  # a second backward through the graph accumulates
                slot[2] = True

            output.register_hook(save_grad)

        return hook

    def _step_hook(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        step = self.num_steps + 1
        if step > self.max_steps:
            raise RuntimeError(f"DualFormRecorder: max_steps={self.max_steps} steps are recorded; step {step} would "
                               "make the record wrong. Create it with a larger max_steps, or close() it first.")
        labels, sample_ids = self._annotation
        for name, slots in self._slots.items():  # check every layer before writing any, so a failure leaves no trace
            n = sum(slot[1] for slot in slots if slot[2])
            for arg, value in (("labels", labels), ("sample_ids", sample_ids)):
                if value is not None and value.numel() != n:
                    raise ValueError(f"{arg}: annotate() was given {value.numel()} entries, but {name} saw {n} "
                                     "patterns this step; give one entry per pattern")
        for name, layer in self.layers.items():
            memory, slots = self._memories[name], self._slots[name]
            bias = layer.bias
            # SGD skips a parameter without grad: no update, no decay
            weight_update = None if layer.weight.grad is None else self._update(name, layer.weight, step,
                                                                                memory.weight_updates)
            bias_update = None if bias is None or bias.grad is None else self._update(name, bias, step,
                                                                                     memory.bias_updates)
            memory._commit(slots, layer.weight, bias, labels, sample_ids, weight_update, bias_update)
            for slot in slots:
                slot[3] = False
            slots.clear()
        self._annotation = (None, None)
        self.num_steps = step

    def _update(self, name: str, param: torch.Tensor, step: int, previous: list[_Update]) -> _Update:
        group = self._groups.get(id(param))
        if group is None:
            group = next(g for g in self.optimizer.param_groups if any(p is param for p in g["params"]))
            self._groups[id(param)] = group
        if not self.exact:  # naive dual: treat the step as plain SGD with the optimiser's learning rate
            return _Update(step, float(group["lr"]), 0.0, 0.0, False)
        update = _Update(step, float(group["lr"]), float(group.get("momentum", 0.0)),
                         float(group.get("weight_decay", 0.0)), bool(group.get("nesterov", False)))
        if previous and previous[-1].momentum != update.momentum:
            raise RuntimeError(f"{name}: momentum changed from {previous[-1].momentum} to {update.momentum} during "
                               "recording; PyTorch then restarts its buffer, which this recorder does not model")
        return update

    # -- reading -----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def dual(self, *, at_step: int | None = None) -> Iterator[None]:
        """Within this block every recorded layer computes its dual form instead of ``W x + b``.

        Layers that were not recorded keep their current weights. ``at_step`` evaluates the recorded layers as they
        were after that step. Runs under ``torch.no_grad()``; nothing is recorded meanwhile.
        """
        self.check()
        for memory in self._memories.values():
            memory._resolve_step(at_step)

        def make_hook(name: str):
            def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
                x = inputs[0]
                query = x.reshape(-1, module.in_features)  # (Q, D_in)
                out = dual_linear(self._memories[name], query, at_step=at_step)
                return out.to(output.dtype).reshape(*x.shape[:-1], module.out_features)
            return hook

        handles = [layer.register_forward_hook(make_hook(name)) for name, layer in self.layers.items()]
        recording, self._recording = self._recording, False
        try:
            with torch.no_grad(), warnings.catch_warnings():
                if not self.exact:  # warned once when recording began; one warning per layer call would drown it
                    warnings.simplefilter("ignore", InexactDualWarning)
                yield
        finally:
            self._recording = recording
            for handle in handles:
                handle.remove()

    def layer_inputs(self, *args, at_step: int | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """Run ``model(*args, **kwargs)`` in dual form and return each recorded layer's input, ``(Q, D_in)``.

        These are the queries of the spotlight analysis: the test input as each layer sees it.
        """
        captured: dict[str, torch.Tensor] = {}

        def make_hook(name: str):
            def hook(module: nn.Module, inputs: tuple) -> None:
                captured[name] = inputs[0].detach().reshape(-1, module.in_features)
            return hook

        handles = [layer.register_forward_pre_hook(make_hook(name)) for name, layer in self.layers.items()]
        try:
            with self.dual(at_step=at_step):
                self.model(*args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
        return captured

    def close(self) -> None:
        """Remove the recording hooks (the memories stay readable). Idempotent."""
        for slots in self._slots.values():  # an unfinished step is not part of the record
            for slot in slots:
                slot[3] = False
            slots.clear()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._recording = False

    def __enter__(self) -> DualFormRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DualFormRecorder({list(self._memories)}, {self.num_steps} steps recorded, {self.nbytes / 1e6:.1f} MB)"
