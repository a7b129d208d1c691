"""Checks for chapter 05, the dual form. Each compares the student's function with :mod:`ttr_edu.dual_form`.

Every exercise is declared once (:func:`ttr_edu.checks._rules.exercise`), its cases in float64 and float32 where the
text allows either; "no Python loop" is held by the number of torch operations the answer runs at two sizes
(:class:`~ttr_edu.checks._rules.OpCount`), and the momentum rescaling, which the text asks for in float64, names the
dtype when an answer computes in float32.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import torch
from torch import nn

from ttr_edu import dual_form
from ttr_edu.checks._core import CheckFailed, random_case
from ttr_edu.checks._rules import OpCount, Rules, exercise

__all__ = [
    "check_dual_output",
    "check_momentum_rescale",
    "check_class_votes",
    "check_record_training",
    "reference_record_training",
]

# D_in ≠ D_out in most cases, so that a transposed product cannot pass by accident.
SHAPES = [(1, 1, 1, 1), (5, 4, 3, 2), (9, 6, 2, 4), (20, 8, 5, 7)]  # (N, D_in, D_out, Q)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _dual_case(seed: int, n: int, d_in: int, d_out: int, q: int, dtype: torch.dtype = torch.float64) -> dict:
    case = random_case(seed, W0=(d_out, d_in), keys=(n, d_in), values=(n, d_out), query=(q, d_in))
    return {name: x.to(dtype) for name, x in case.items()}


def _dual_cases() -> Iterator[dict]:
    for i, shape in enumerate(SHAPES):
        yield _dual_case(500 + i, *shape)
    yield _dual_case(550, 12, 5, 3, 6, torch.float32)


def _dual_at(n: int, generator: torch.Generator | None = None) -> dict:
    """``n`` patterns and ``n`` queries of fixed widths: only a loop over either changes the operation count."""
    return _dual_case(560 + n, n, 4, 3, n)


def _momentum_cases() -> Iterator[dict]:
    for momentum, num_steps in [(0.0, 4), (0.5, 1), (0.5, 6), (0.9, 25), (0.99, 3)]:
        yield {"momentum": momentum, "num_steps": num_steps}


def _fresh_momentum(generator: torch.Generator) -> dict:
    """A momentum in [0, 0.99] (steps of 0.01) and 1 to 30 steps no one has seen: the grader's extra case."""
    return {
        "momentum": int(torch.randint(0, 100, (), generator=generator)) / 100,
        "num_steps": int(torch.randint(1, 31, (), generator=generator)),
    }


def _vote_cases() -> Iterator[dict]:
    # unequal class sizes and one class with no pattern at all: a mean or a count differs from the sum
    for i, (q, n, num_classes) in enumerate([(1, 3, 2), (3, 10, 4), (5, 40, 10)]):
        g = _generator(700 + i)
        labels = torch.randint(0, num_classes - 1, (n,), generator=g)  # the last class stays empty
        labels[0] = 0
        yield {
            "scores": torch.rand(q, n, generator=g, dtype=torch.float64),
            "labels": labels,
            "num_classes": num_classes,
        }
    # Signed scores: the vote is the sum of the scores as given (the spec takes any (Q, N) scores, and the package's
    # class_votes accepts them), so an answer that takes |scores| itself, or clamps them, is wrong here.
    g = _generator(710)
    labels = torch.randint(0, 3, (12,), generator=g)
    labels[:3] = torch.arange(3)
    yield {"scores": torch.randn(4, 12, generator=g, dtype=torch.float64), "labels": labels, "num_classes": 3}
    g = _generator(720)
    yield {"scores": torch.randn(3, 9, generator=g), "labels": torch.randint(0, 4, (9,), generator=g), "num_classes": 5}


@exercise(
    reference=dual_form.dual_output,
    cases=_dual_cases,
    rules=Rules(
        op_count=OpCount(
            _dual_at,
            sizes=(4, 32),
            high=0.3,
            size_name="N",
            expect="Matrix products run the same few operations whatever the number of patterns and queries; a "
            "Python loop over either runs some for each of them.",
        ),
        why="use matrix products, no Python loop",
    ),
    rtol=1e-10,
    atol=1e-12,
)
def check_dual_output(dual_output: Callable) -> bool:
    """Check ``dual_output(W0, keys, values, query) -> W₀x + Σ_t e_t (x_tᵀ x)`` for each query row x, without a loop.

    Shapes: ``W0 (D_out, D_in)``, ``keys (N, D_in)``, ``values (N, D_out)``, ``query (Q, D_in)`` -> ``(Q, D_out)``.
    """


@exercise(reference=dual_form.momentum_rescale, cases=_momentum_cases, rtol=1e-10, atol=1e-12, fresh=_fresh_momentum)
def check_momentum_rescale(momentum_rescale: Callable) -> bool:
    """Check ``momentum_rescale(momentum, num_steps) -> (T,)`` with entry t−1 equal to ``(1 − μ^{T−t+1})/(1 − μ)``.

    The exercise asks for float64; a float32 answer fails with a message that names the dtype (its values agree to
    float32 rounding only, so "got 9.2821, expected 9.2821" would not say what is wrong).
    """


@exercise(reference=dual_form.class_votes, cases=_vote_cases, rtol=1e-10, atol=1e-12)
def check_class_votes(class_votes: Callable) -> bool:
    """Check ``class_votes(scores, labels, num_classes) -> (Q, C)``, the per-class sum of the scores."""


# --- exercise: a hook-based recorder ---------------------------------------------------------------------------


def _recording_setup(seed: int, layer_name: str):
    """A small float64 MLP, plain SGD and four batches of (x, label); the same for student and reference."""
    g = _generator(900 + seed)
    torch.manual_seed(900 + seed)
    model = nn.Sequential(nn.Linear(5, 6, bias=False), nn.ReLU(), nn.Linear(6, 3, bias=False)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3 + 0.1 * (seed % 3))  # 0.3 to 0.5 for any seed
    batches = [
        (torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randint(0, 3, (4,), generator=g)) for _ in range(4)
    ]
    return model, layer_name, optimizer, batches


def reference_record_training(
    model: nn.Module, layer_name: str, optimizer: torch.optim.Optimizer, batches
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train ``model`` with cross-entropy on ``batches`` and return the memory of ``layer_name``:
    ``(W0, keys, values)``.

    Shapes: ``W0 (D_out, D_in)``, ``keys (N, D_in)``, ``values (N, D_out)`` with ``N`` the patterns seen, in order.
    The package's :class:`ttr_edu.dual_form.DualFormRecorder` does the recording.
    """
    recorder = dual_form.DualFormRecorder(
        model, optimizer, [layer_name], max_steps=len(batches), patterns_per_step=len(batches[0][0]), verbose=False
    )
    for x, y in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    recorder.close()
    memory = recorder.memory(layer_name)
    return memory.W0, memory.keys, memory.values()


def _reference_on_a_fresh_setup(seed: int, layer_name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`reference_record_training` on the case's fresh model, optimiser and batches (seeded by ``seed``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FIRST_LAYER_HOOK_WARNING)
        return reference_record_training(*_recording_setup(seed, layer_name))


def _on_a_fresh_setup(record_training: Callable, case: dict):
    """Call the answer on the case's fresh model, optimiser and batches; refuse hooks left attached and a ``W0`` that
    is the trained weight (both seen only here, where the model is)."""
    model, name, optimizer, batches = _recording_setup(**case)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FIRST_LAYER_HOOK_WARNING)
        result = record_training(model, name, optimizer, batches)
    left = [n for n, m in model.named_modules() if m._forward_hooks or m._backward_hooks or m._forward_pre_hooks]
    if left:
        raise CheckFailed(
            f"hooks are still attached to {left} after your function returned; keep the handles "
            "that register_*_hook returns and call handle.remove() on each"
        )
    trained = model.get_submodule(name).weight
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        if result[0].shape == trained.shape and torch.equal(result[0].detach(), trained.detach()):
            raise CheckFailed(
                "your W0 equals the weight *after* training. W0, the first result, is the weight before the "
                "first step: copy it first, with .detach().clone() (a .detach() alone is a view, which the "
                "optimiser's steps change in place)"
            )
    return result


#: PyTorch's warning when a full backward hook sits on a layer whose input needs no gradient (the first layer, fed
#: the data): expected in these exercises, so the check and chapter 05 filter exactly this message.
FIRST_LAYER_HOOK_WARNING = "Full backward hook is firing when gradients are computed with respect to module outputs"


def _recording_cases() -> Iterator[dict]:
    yield from ({"seed": 0, "layer_name": "0"}, {"seed": 1, "layer_name": "2"}, {"seed": 2, "layer_name": "2"})


def _fresh_recording(generator: torch.Generator) -> dict:
    """A seed no one has seen (a new model, new batches) and either recorded layer: the grader's extra case."""
    return {
        "seed": int(torch.randint(3, 2**31, (), generator=generator)),
        "layer_name": ("0", "2")[int(torch.randint(2, (), generator=generator))],
    }


@exercise(
    reference=_reference_on_a_fresh_setup,
    cases=_recording_cases,
    fresh=_fresh_recording,
    rules=Rules(
        answers=(
            reference_record_training,
            dual_form.DualFormRecorder.__init__,
            dual_form.DualFormRecorder.memory,
            dual_form.DualFormRecorder.memories,
        )
    ),
    call=_on_a_fresh_setup,
    rtol=1e-9,
    atol=1e-12,
)
def check_record_training(record_training: Callable) -> bool:
    """Check ``record_training(model, layer_name, optimizer, batches) -> (W0, keys, values)`` on a fresh small MLP.

    Each case builds the same seeded model, SGD optimiser and batches for your function and for the reference, so
    your function may train the model it is given. Cases record the first and the last layer.
    """
