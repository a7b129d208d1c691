"""A small training loop for the course's experiments: Adam, a progress bar, early stopping at a target loss.

The loop follows the synthetic experiments of Schlag et al. (2021, §6.1): Adam, a fresh random batch every step,
and a stop as soon as the loss on a fixed evaluation batch reaches a target (they used 1e-3). The whole run is
reproducible from ``seed``: the data, the model's own random draws (FAVOR+ redraws its features on every call)
and nothing else, because the global RNG is forked and restored around the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from ttr_edu._internal.progress import progress_enabled  # one rule for bars: off while the book builds
from ttr_edu._internal.validation import check_positive_float, check_positive_int, check_scalar_fits, check_seed

__all__ = ["TrainResult", "train", "evaluate", "progress_enabled"]


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        steps: optimiser steps taken.
        best_eval_loss: the lowest evaluation loss seen (the paper reports this "best" loss).
        final_eval_loss: the evaluation loss after the last step.
        reached_target: ``True`` when training stopped early because the evaluation loss reached the target.
        history: ``(step, eval_loss)`` pairs, one per evaluation.
    """

    steps: int
    best_eval_loss: float
    final_eval_loss: float
    reached_target: bool
    history: list[tuple[int, float]] = field(default_factory=list)


def _default_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    return model.loss(batch)


def _check_model_and_loss(model, loss_fn) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn: expected a function (model, batch) -> loss, got {type(loss_fn).__name__}")


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: list,
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] = _default_loss,
) -> float:
    """Mean of ``loss_fn(model, batch)`` over ``batches``, in eval mode, without gradients.

    Raises:
        TypeError: ``model`` not an ``nn.Module``, ``batches`` not a list or tuple, ``loss_fn`` not callable.
        ValueError: no batches (the mean of nothing).
    """
    _check_model_and_loss(model, loss_fn)
    if not isinstance(batches, (list, tuple)):
        raise TypeError(f"batches: expected a list of batches, got {type(batches).__name__}")
    if not batches:
        raise ValueError("batches: expected at least one batch, got an empty list")
    was_training = model.training
    model.eval()
    try:
        return sum(float(loss_fn(model, b)) for b in batches) / len(batches)
    finally:
        model.train(was_training)


def train(
    model: torch.nn.Module,
    sample_batch: Callable[[torch.Generator], Any],
    *,
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] = _default_loss,
    max_steps: int = 1000,
    lr: float = 1e-3,
    target_loss: float | None = 1e-3,
    eval_every: int = 50,
    eval_batches: int = 4,
    seed: int = 0,
    progress: bool | None = None,
    desc: str = "train",
) -> TrainResult:
    """Train ``model`` with Adam on fresh batches until the evaluation loss reaches ``target_loss``.

    Args:
        model: a ``torch.nn.Module``; by default its ``loss(batch)`` method gives the scalar loss.
        sample_batch: ``sample_batch(generator) -> batch``, e.g.
            ``lambda g: capacity_batch(32, 20, generator=g)``.
        loss_fn: ``loss_fn(model, batch) -> scalar tensor`` (default ``model.loss(batch)``).
        max_steps: most optimiser steps.
        lr: Adam's learning rate (the paper: 1e-3).
        target_loss: stop as soon as the evaluation loss is <= this (the paper: 1e-3); ``None`` never stops early.
        eval_every: steps between evaluations.
        eval_batches: batches in the fixed evaluation set (drawn once, with a generator seeded ``seed + 1``).
        seed: seeds the training batches, the evaluation set and the global RNG inside the run (restored after).
        progress: show a tqdm bar; ``None`` shows one in a terminal or notebook and hides it in logs and pipes.
        desc: the bar's label.

    Returns:
        A :class:`TrainResult`.

    Raises:
        TypeError / ValueError: a step count, ``lr`` or ``target_loss`` of the wrong type or sign, an ``lr`` that
            overflows float32, a ``model``, ``sample_batch`` or ``loss_fn`` of the wrong kind, a ``progress`` that
            is neither a bool nor None.
        ValueError: the model has no trainable parameters (use :func:`evaluate` instead).
        FloatingPointError: the training loss became NaN or infinite (named ``loss_fn``: a diverging run).
    """
    _check_model_and_loss(model, loss_fn)
    if not callable(sample_batch):
        raise TypeError(f"sample_batch: expected a function generator -> batch, got {type(sample_batch).__name__}")
    progress_enabled(progress)  # a bool or None
    check_positive_int("max_steps", max_steps)
    check_positive_int("eval_every", eval_every)
    check_positive_int("eval_batches", eval_batches)
    check_positive_float("lr", lr)
    check_scalar_fits("lr", lr, torch.float32)  # Adam keeps it as a float32 tensor on the GPU
    if target_loss is not None:
        check_positive_float("target_loss", target_loss, allow_zero=True)
    check_seed("seed", seed)
    check_seed("seed", seed + 1)  # the evaluation set's seed
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise ValueError("model: it has no trainable parameters; call evaluate(model, batches) instead")

    train_gen = torch.Generator().manual_seed(seed)
    eval_gen = torch.Generator().manual_seed(seed + 1)
    eval_set = [sample_batch(eval_gen) for _ in range(eval_batches)]
    optimizer = torch.optim.Adam(parameters, lr=lr)
    history: list[tuple[int, float]] = []
    best = final = float("inf")
    reached = False
    step = 0

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model.train()
        bar = tqdm(total=max_steps, desc=desc, disable=not progress_enabled(progress), leave=False)
        with bar:
            while step < max_steps:
                loss = loss_fn(model, sample_batch(train_gen))
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"loss_fn: the training loss became {loss.item()} at step {step} (a diverging run: try a "
                        f"lower lr than {lr:g})"
                    )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                bar.update(1)
                if step % eval_every == 0 or step == max_steps:
                    final = evaluate(model, eval_set, loss_fn)
                    best = min(best, final)
                    history.append((step, final))
                    bar.set_postfix(eval_loss=f"{final:.2e}")
                    if target_loss is not None and final <= target_loss:
                        reached = True
                        break
    return TrainResult(step, best, final, reached, history)
