"""The hooks that record chosen ``nn.Linear`` layers while a model trains (:class:`DualFormRecorder`).

Each recorded layer becomes a :class:`~ttr_edu.dual_form.memory.LinearMemory`; :meth:`DualFormRecorder.dual` then
runs the model with every recorded layer in its dual form (Irie, Csordás, Schmidhuber 2022).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from ttr_edu._internal.validation import check_allocation, check_bool, check_positive_int
from ttr_edu.dual_form.maths import InexactDualWarning, _describe, _is_integer_tensor
from ttr_edu.dual_form.memory import LinearMemory, _Update, dual_linear

__all__ = ["DualFormRecorder"]


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
            ``allow_inexact``; a non-floating ``key_dtype``; a flag that is not a bool.
        ValueError: an unknown layer name, a layer not optimised by ``optimizer`` or frozen, SGD with dampening or
            ``maximize``, a non-positive ``max_steps`` / ``patterns_per_step``, or buffers for
            ``max_steps × patterns_per_step`` patterns that would not fit in memory.
        RuntimeError: during training, when the buffers are full or momentum changed; when a record is read, when
            a step's gradient was not the recorded sum (``verify``).

    Source: Irie, Csordás, Schmidhuber 2022 [irie2022dual].
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        layers: Sequence[str],
        *,
        max_steps: int,
        patterns_per_step: int,
        key_dtype: torch.dtype | None = None,
        allow_inexact: bool = False,
        verify: bool = True,
        verbose: bool = True,
    ) -> None:
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
        for name, flag in (("allow_inexact", allow_inexact), ("verify", verify), ("verbose", verbose)):
            check_bool(name, flag)
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
                raise TypeError(
                    f"layers: {name!r} is a {type(layer).__name__}; only nn.Linear layers can be "
                    "recorded (their update is Σ e_t x_tᵀ)"
                )
            self._check_optimised(name, layer, optimizer)
            self.layers[name] = layer

        capacity = max_steps * patterns_per_step
        width = sum(layer.in_features + layer.out_features for layer in self.layers.values())
        weight = next(iter(self.layers.values())).weight
        check_allocation(
            "max_steps" if max_steps >= patterns_per_step else "patterns_per_step",
            (capacity, width),
            dtype=weight.dtype,
            device=weight.device,
            what="the buffers of max_steps × patterns_per_step keys and gradients",
        )
        self.max_steps, self.patterns_per_step = max_steps, patterns_per_step
        self._memories = {
            name: LinearMemory(
                name, layer, optimizer.state, max_steps, capacity, key_dtype or layer.weight.dtype, self.exact, verify
            )
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
            why = (
                f"optimizer: {type(optimizer).__name__} does not update a weight by Σ_t e_t x_tᵀ (Adam and its kin "
                "rescale every coordinate by running statistics of the gradients), so no exact dual form exists. "
                "Only torch.optim.SGD (with momentum, Nesterov, weight decay) is represented exactly"
            )
            if not allow_inexact:
                raise TypeError(why + "; pass allow_inexact=True to record the naive SGD dual and measure its error.")
            warnings.warn(
                why + "; recording the naive SGD dual (e_t = −lr ∂L/∂y_t), which is NOT the model's output.",
                InexactDualWarning,
                stacklevel=3,
            )
            return False
        for group in optimizer.param_groups:
            if group.get("maximize", False):
                raise ValueError("optimizer: SGD with maximize=True is not supported (the values would change sign)")
            if group.get("momentum", 0.0) and group.get("dampening", 0.0):
                raise ValueError(
                    f"optimizer: SGD with dampening={group['dampening']} is not supported: PyTorch skips "
                    "the dampening on the first step, which this recorder does not model; use dampening=0"
                )
        return True

    @staticmethod
    def _check_optimised(name: str, layer: nn.Linear, optimizer: torch.optim.Optimizer) -> None:
        optimised = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = [("weight", layer.weight)] + ([] if layer.bias is None else [("bias", layer.bias)])
        for pname, p in params:
            if not p.requires_grad:
                raise ValueError(
                    f"layers: {name}.{pname} does not require grad, so training never changes it; "
                    "record only trained layers"
                )
            if id(p) not in optimised:
                raise ValueError(
                    f"layers: {name}.{pname} is not among the optimizer's parameters, so the recorder "
                    "cannot know how it is updated"
                )

    def describe(self) -> str:
        """The memory cost of the recording, layer by layer (printed when the recorder is created)."""
        total = self.nbytes
        lines = [
            f"DualFormRecorder: {len(self._memories)} layer(s) × up to {self.max_steps:,} steps × "
            f"{self.patterns_per_step:,} patterns/step; buffers allocated now: {total / 1e6:.1f} MB"
        ]
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
            raise KeyError(
                f"layer {name!r} was not recorded; recorded layers: {list(self._memories)}. Create the "
                "DualFormRecorder with it in `layers` before training to evaluate its dual form"
            )
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
                raise TypeError(
                    f"{arg}: expected an integer torch.Tensor, one entry per pattern, got {_describe(value)}"
                )
        self._annotation = (
            None if labels is None else labels.detach().reshape(-1),
            None if sample_ids is None else sample_ids.detach().reshape(-1),
        )

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
                rows = memory.grads_buffer[slot[0] : slot[0] + slot[1]]  # (n, D_out)
                grad = grad.detach().reshape(-1, module.out_features)
                rows.add_(grad) if slot[2] else rows.copy_(grad)  # a second backward through the graph accumulates
                slot[2] = True

            output.register_hook(save_grad)

        return hook

    def _step_hook(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        step = self.num_steps + 1
        if step > self.max_steps:
            raise RuntimeError(
                f"DualFormRecorder: max_steps={self.max_steps} steps are recorded; step {step} would "
                "make the record wrong. Create it with a larger max_steps, or close() it first."
            )
        labels, sample_ids = self._annotation
        for name, slots in self._slots.items():  # check every layer before writing any, so a failure leaves no trace
            n = sum(slot[1] for slot in slots if slot[2])
            for arg, value in (("labels", labels), ("sample_ids", sample_ids)):
                if value is not None and value.numel() != n:
                    raise ValueError(
                        f"{arg}: annotate() was given {value.numel()} entries, but {name} saw {n} "
                        "patterns this step; give one entry per pattern"
                    )
        for name, layer in self.layers.items():
            memory, slots = self._memories[name], self._slots[name]
            bias = layer.bias
            # SGD skips a parameter without grad: no update, no decay
            weight_update = (
                None if layer.weight.grad is None else self._update(name, layer.weight, step, memory.weight_updates)
            )
            bias_update = (
                None if bias is None or bias.grad is None else self._update(name, bias, step, memory.bias_updates)
            )
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
        update = _Update(
            step,
            float(group["lr"]),
            float(group.get("momentum", 0.0)),
            float(group.get("weight_decay", 0.0)),
            bool(group.get("nesterov", False)),
        )
        if previous and previous[-1].momentum != update.momentum:
            raise RuntimeError(
                f"{name}: momentum changed from {previous[-1].momentum} to {update.momentum} during "
                "recording; PyTorch then restarts its buffer, which this recorder does not model"
            )
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
