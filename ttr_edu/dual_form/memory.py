"""The record of one trained ``nn.Linear`` (:class:`LinearMemory`) and the functions that read it in dual form.

The record holds the layer's keys (its inputs at training time), its values (the output gradients, scaled by the
optimiser's coefficients) and the starting weights; :func:`dual_linear` evaluates ``a W₀x + c buf₀x + Σ_t e_t (x_tᵀx)``
and :func:`spotlight_scores` / :func:`top_patterns` rank the stored patterns for a test input (Irie, Csordás,
Schmidhuber 2022). The optimiser algebra behind the coefficients is in :mod:`ttr_edu.dual_form`'s docstring.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ttr_edu._internal.validation import check_positive_int, check_tensor, guarded
from ttr_edu.dual_form.maths import (
    InexactDualWarning,
    _dtype_name,
    dual_output,
)

__all__ = ["LinearMemory", "TopPatterns", "dual_linear", "spotlight_scores", "top_patterns"]


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

    def __init__(
        self,
        name: str,
        layer: nn.Linear,
        optimizer_state: dict,
        max_steps: int,
        capacity: int,
        key_dtype: torch.dtype,
        exact: bool,
        verify: bool,
    ) -> None:
        weight = layer.weight
        self.name, self.d_in, self.d_out, self.capacity, self.exact = (
            name,
            layer.in_features,
            layer.out_features,
            capacity,
            exact,
        )
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
            raise ValueError(
                f"at_step: expected 0 <= at_step <= {self.num_steps} (steps recorded for {self.name}), got {at_step}"
            )
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
                "a": a,
                "c": c,
                "rho": torch.tensor(rho, dtype=torch.float64),
                "update_steps": torch.tensor([u.step for u in w_updates], dtype=torch.int64),
                "value_scale": torch.tensor([r / -u.lr for r, u in zip(rho, w_updates)], dtype=torch.float64),
                "bias_a": ba,
                "bias_c": bc,
                "bias_rho": torch.tensor(brho, dtype=torch.float64),
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
        return (
            f"{self.name}: Linear({self.d_in}→{self.d_out}), {self.capacity:,} patterns: keys {keys_mb:.1f} MB "
            f"({_dtype_name(self.keys_buffer.dtype)}), values {values_mb:.1f} MB "
            f"({_dtype_name(self.grads_buffer.dtype)}), steps/labels/ids{' and checks' if self.verify else ''} "
            f"{self.nbytes / 1e6 - keys_mb - values_mb:.1f} MB"
        )

    def __repr__(self) -> str:
        return (
            f"LinearMemory({self.name}, Linear({self.d_in}→{self.d_out}), {self.num_patterns:,} patterns, "
            f"{self.num_steps} steps{'' if self.exact else ', INEXACT'})"
        )

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

    def _commit(
        self,
        slots: list[list],
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor | None,
        sample_ids: torch.Tensor | None,
        weight_update: _Update | None,
        bias_update: _Update | None,
    ) -> None:
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
                    f"{self.capacity - self.num_patterns} fit. Recording stops here rather than grow without bound: "
                    "create the recorder with a larger "
                    "max_steps or patterns_per_step, or close() it before training on."
                )
            if start != write:  # an earlier call of this step got no gradient: close the gap
                self.keys_buffer[write : write + n] = self.keys_buffer[start : start + n].clone()
                self.grads_buffer[write : write + n] = self.grads_buffer[start : start + n].clone()
                if self.verify:
                    self.probed_keys_buffer[write : write + n] = self.probed_keys_buffer[start : start + n].clone()
            write += n
        n = write - self.num_patterns
        if n:
            if weight_update is None:
                raise RuntimeError(f"{self.name}: {n} patterns got gradients but {self.name}.weight.grad is None")
            if labels is not None:
                self.meta_buffer[0, self.num_patterns : write] = labels
            if sample_ids is not None:
                self.meta_buffer[1, self.num_patterns : write] = sample_ids
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
        U, dtype = last - first, grads.dtype
        # in the weight's dtype: a bool mask times the float r_b would be float32, and round r_b away in float64
        has_bias = torch.tensor(self.probe_has_bias[first:last], device=ends.device, dtype=dtype)  # (U,)
        projected = self.probed_keys_buffer[p0:p1] + self.probe_bias * has_bias[segment]  # (n,): x_tᵀr + r_b
        want = grads.new_zeros(U, self.d_out).index_add_(0, segment, grads * projected[:, None])  # (U, D_out)
        grads_sq = grads.new_zeros(U).index_add_(0, segment, grads.pow(2).sum(1))
        proj_sq = grads.new_zeros(U).index_add_(0, segment, projected.pow(2))
        got = self.probed_grad_buffer[first:last]  # (U, D_out)
        probe_norm = (self.probe.norm() ** 2 + self.probe_bias**2).sqrt()
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


def _check_memory(memory) -> LinearMemory:
    if not isinstance(memory, LinearMemory):
        raise TypeError(f"memory: expected a LinearMemory (recorder.memory('<layer>')), got {type(memory).__name__}")
    return memory


def _check_query(memory: LinearMemory, query: torch.Tensor) -> None:
    check_tensor("query", query)
    if query.dim() != 2 or query.shape[1] != memory.d_in:
        raise ValueError(
            f"query: expected shape (Q, D_in) = (Q, {memory.d_in}) for layer {memory.name}, got {tuple(query.shape)}"
        )
    if query.device != memory.keys_buffer.device:
        raise ValueError(
            f"query: expected a tensor on {memory.keys_buffer.device} (the device of the record of {memory.name}), "
            f"got one on {query.device}"
        )


# ----------------------------------------------------------------------------------------------------------------
# Reading a memory: dual forward and spotlights
# ----------------------------------------------------------------------------------------------------------------


@guarded
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
        warnings.warn(
            f"{memory.name}: recorded under a non-SGD optimiser; this dual is the naive SGD dual and is not "
            "the model's output",
            InexactDualWarning,
            stacklevel=2,
        )
    coef = memory.coefficients(at_step)
    n = memory.patterns_until(at_step)
    dtype = memory.grads_buffer.dtype
    W_initial = coef["a"] * memory.W0 + coef["c"] * memory.W_buf0  # (D_out, D_in)
    out = dual_output(W_initial, memory.keys_buffer[:n], memory.values(at_step), query.to(dtype))  # (Q, D_out)
    if memory.b0 is not None:
        out = out + (coef["bias_a"] * memory.b0 + coef["bias_c"] * memory.b_buf0 + memory.bias_value_sum(at_step))
    return out


@guarded
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


@guarded
def top_patterns(
    memory: LinearMemory, query: torch.Tensor, k: int, *, at_step: int | None = None, distinct_samples: bool = False
) -> TopPatterns:
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
    return TopPatterns(
        score=score,
        index=index,
        step=memory.steps[index],
        label=memory.labels[index],
        sample_id=memory.sample_ids[index],
    )


def _top_distinct(
    scores: torch.Tensor, sample_ids: torch.Tensor, k: int, name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of each row of ``scores`` (Q, N) keeping the first pattern of each sample id in score order."""
    if sample_ids.numel() and sample_ids.min() < 0:
        raise ValueError(
            f"distinct_samples: some patterns of {name} have no sample id; pass sample_ids to "
            "DualFormRecorder.annotate() while training, or use distinct_samples=False"
        )
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
