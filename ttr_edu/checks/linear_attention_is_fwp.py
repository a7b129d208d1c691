"""Checks for chapter 02, linear attention is a fast weight programmer.

The student's functions work on one sequence of one head: ``q, k`` are ``(T, D_k)``, ``v`` is ``(T, D_v)`` and the
output is ``(T, D_v)``. Each check compares them with :mod:`ttr_edu.ops.linear_attention` (``scale=1.0``, as the
paper), on random cases where ``D_k ≠ D_v`` so that a transposed state cannot pass by accident, with correlated keys
and in float32 as well as float64. Every exercise is declared once (:func:`ttr_edu.checks._rules.exercise`), and the
package's linear attention ops are ruled out as answers.

Each exercise asks for one form, and the check holds it to that form by what the answer does: the number of torch
operations it runs at two sizes (:class:`~ttr_edu.checks._rules.OpCount`: a loop over the tokens for the recurrence,
no loop for the parallel forms, no loop over single tokens for the chunk form); for the recurrence and the chunk form,
the work of its torch operations at ``T``, ``2T`` and ``4T`` (:class:`~ttr_edu.checks._rules.WorkCount`, elements
read and written plus the multiply-adds of matrix products, counted deterministically): a linear form's work is
exactly affine in ``T``, so ``W(4T) − 3 W(2T) + 2 W(T) = 0``, while any work that grows with a token's or a chunk's
position (a prefix re-read or re-summed, a normaliser re-summed, an output grown by ``torch.cat``, a hidden ``T × T``
matrix) makes it positive; and the size of what it holds (for the recurrence, the numbers held at once: one state,
not one per token; for the chunk form, its intermediate tensors: no ``T × T`` matrix, no state per token).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack, _pop_mode, _push_mode
from torch.utils._pytree import tree_leaves

from ttr_edu.checks._guard import ForbiddenCall
from ttr_edu.checks._rules import OpCount, Rules, WorkCount, exercise
from ttr_edu.ops import linear_attention_chunk, linear_attention_parallel, linear_attention_recurrent
from ttr_edu.ops.feature_maps import elu_plus_one

__all__ = [
    "check_fast_weight_recurrence",
    "check_causal_linear_attention",
    "check_normalized_linear_attention",
    "check_chunk_linear_attention",
    "check_normalized_chunk_linear_attention",
]

SHAPES = [(1, 3, 2), (5, 4, 3), (9, 6, 7), (16, 8, 5)]  # (T, D_k, D_v)

#: every form of linear attention in the package: none of them is the student's answer to any exercise here
LINEAR_ATTENTION = (linear_attention_recurrent, linear_attention_parallel, linear_attention_chunk)


def _fla(x: torch.Tensor) -> torch.Tensor:
    return x[None, :, None]  # (T, D) -> (1, T, 1, D)


def _reference_recurrence(q, k, v):
    """``o_t = S_tᵀ q_t`` with ``S_t = S_{t-1} + k_t v_tᵀ``: the package's recurrent form on one head."""
    return linear_attention_recurrent(_fla(q), _fla(k), _fla(v), scale=1.0)[0][0, :, 0]


def _reference_parallel(q, k, v):
    """``(Q Kᵀ ⊙ M) V``: the package's parallel form on one head."""
    return linear_attention_parallel(_fla(q), _fla(k), _fla(v), scale=1.0)[0][0, :, 0]


def _reference_normalized(q, k, v):
    """``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)``: the package's parallel form with the normaliser, on one head."""
    return linear_attention_parallel(_fla(q), _fla(k), _fla(v), scale=1.0, normalize=True, eps=1e-6)[0][0, :, 0]


def _reference_chunk(q, k, v, chunk_size):
    """The package's chunk form on one head."""
    return linear_attention_chunk(_fla(q), _fla(k), _fla(v), scale=1.0, chunk_size=chunk_size)[0][0, :, 0]


def _sequence(t: int, d_k: int, d_v: int, g: torch.Generator, *, positive=False, correlated=False, dtype=None):
    """One head's ``q, k, v``; ``correlated`` keys share a direction, ``positive`` ones went through ELU + 1 (as
    normalised attention needs)."""
    q, k = (torch.randn(t, d_k, generator=g, dtype=torch.float64) for _ in range(2))
    if correlated:
        k = k + 1.5 * torch.randn(d_k, generator=g, dtype=torch.float64)
    if positive:
        q, k = elu_plus_one(q), elu_plus_one(k)
    v = torch.randn(t, d_v, generator=g, dtype=torch.float64)
    return {name: x.to(dtype or torch.float64) for name, x in (("q", q), ("k", k), ("v", v))}


def _cases(seed: int, positive: bool = False) -> Iterator[dict]:
    for i, (t, d_k, d_v) in enumerate(SHAPES):
        yield _sequence(t, d_k, d_v, torch.Generator().manual_seed(seed + i), positive=positive)
    yield _sequence(11, 5, 3, torch.Generator().manual_seed(seed + 10), positive=positive, correlated=True)
    yield _sequence(7, 4, 6, torch.Generator().manual_seed(seed + 11), positive=positive, dtype=torch.float32)


def _at_length(t: int, generator: torch.Generator | None = None) -> dict:
    """``T`` tokens of width 4, for the loop rules: only the length changes between the two counts."""
    return _sequence(t, 4, 3, generator or torch.Generator().manual_seed(t))


def _recurrence_at_length(t: int) -> dict:
    """``T`` tokens of width 16, for the cost rule of the recurrence: at ``T = 64`` to ``256`` a loop that re-reads
    every earlier token at each step (``T² d`` in all) already outweighs the recurrence's own work (``T d²``)."""
    return _sequence(t, 16, 16, torch.Generator().manual_seed(t))


#: the cost rule's lengths, ``T``, ``2T`` and ``4T``: a cost linear in ``T`` is affine in it, so its work there has
#: ``W(4T) − 3 W(2T) + 2 W(T) = 0`` exactly (:class:`~ttr_edu.checks._rules.WorkCount` with ``affine``); one like
#: ``T²`` grows about 16 times from ``T`` to ``4T``
_COST_LENGTHS = (64, 128, 256)
#: the chunk forms' lengths: multiples of their chunk size 8 (16, 32 and 64 chunks), so that no chunk is short and a
#: right chunk form's work is exactly affine in ``T``
_CHUNK_LENGTHS = (128, 256, 512)
#: the largest growth exponent allowed from ``T`` to ``4T``, beside the exact linearity: linear forms measure 1.0 at
#: most (a part that does not grow with T lowers it), the quadratic answers of the tests 1.80–1.99; a small quadratic
#: part measures less (a normaliser re-summed from the prefix, 1.15) and is refused by the linearity
_COST_HIGH = 1.4


def _positive_at_length(t: int, generator: torch.Generator | None = None) -> dict:
    return _sequence(t, 4, 3, generator or torch.Generator().manual_seed(t), positive=True)


_WHY_FORMS = "the package's linear attention ops compute what the exercise asks you to write"


class _OneModeWatch:
    """A rule watched by one dispatch mode (``_mode``) around each call of the answer
    (:attr:`ttr_edu.checks._rules.Rules.watch`): ``hit`` is the broken rule's message, also raised as
    :class:`ForbiddenCall` (:meth:`_refuse_with`) so that the answer stops there."""

    _mode: TorchDispatchMode
    hit: str | None = None

    def _refuse_with(self, message: str) -> None:
        if self.hit is None:
            self.hit = message
        raise ForbiddenCall(message)

    def __enter__(self):
        _push_mode(self._mode)
        return self

    def __exit__(self, *exc) -> None:
        stack = _get_current_dispatch_mode_stack()
        if stack and stack[-1] is self._mode:
            _pop_mode()
        elif self.hit is None:  # what the answer left on the stack is its own business: it broke a rule
            self.hit = "your function switched off the check's watch of its torch operations; remove that code"


class _RecurrenceMemory(_OneModeWatch):
    """The memory rule of the recurrence, for one case: the numbers held at once in tensors the answer creates may not
    exceed twice what the recurrence itself holds, ``T (2 D_k + 3 D_v) + 3 D_k D_v``: its state, the next state and
    the outer product being added (``3 D_k D_v``), the output rows and their stacked copy, a cast back (``3 T D_v``),
    and cast copies of ``q`` and ``k`` (``2 T D_k``). One state per token (a cumulative sum of the outer products, or
    a list that keeps every ``S_t``) holds ``T D_k D_v``, more than that at the work rule's sizes (``D_k = D_v = 16``,
    ``T ≥ 64``). A tensor counts from the operation that creates it until Python frees it, as
    :class:`ttr_edu.profiling.PeakMemory` counts it; counted in numbers of 8 bytes, so a float32 answer is held to the
    same bound in numbers as a float64 one, and its per-token states are caught at the float64 sizes.

    Entered around each call of the answer (:attr:`ttr_edu.checks._rules.Rules.watch`); ``hit`` is the broken rule's
    message (also raised as :class:`ForbiddenCall`, so that the answer stops there)."""

    def __init__(self, t: int, d_k: int, d_v: int) -> None:
        self.t, self.d_k, self.d_v = t, d_k, d_v
        self.own = t * (2 * d_k + 3 * d_v) + 3 * d_k * d_v
        self.hit = None
        rules = self

        self.live, held = 0, set()

        def free(pointer: int, nbytes: int) -> None:
            if pointer in held:
                held.discard(pointer)
                rules.live -= nbytes

        class Live(TorchDispatchMode):  # the package's PeakMemory, here, where the answer's call trace allows it
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False  # nothing compiles inside an answer: no Dynamo guard (its first import takes seconds)

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                shared = {
                    x.untyped_storage().data_ptr() for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)
                }
                for x in tree_leaves(out):
                    if not isinstance(x, torch.Tensor):
                        continue
                    storage = x.untyped_storage()
                    pointer, nbytes = storage.data_ptr(), storage.nbytes()
                    if nbytes == 0 or pointer in shared or pointer in held:
                        continue
                    held.add(pointer)
                    rules.live += nbytes
                    weakref.finalize(storage, free, pointer, nbytes)
                if rules.live > 2 * 8 * rules.own:
                    rules._refuse(rules.live // 8)
                return out

        self._mode = Live()

    def _refuse(self, held: int) -> None:
        message = (
            f"your function held about {held} numbers at once on T = {self.t} tokens (D_k = {self.d_k}, D_v = "
            f"{self.d_v}); the recurrence holds one state, the outputs and copies of the inputs, {self.own} numbers "
            f"(twice that is allowed). A T × T score matrix ({self.t * self.t} numbers: the parallel form, which is "
            f"the next exercise) or one state per token (a cumulative sum of the outer products k_t v_tᵀ, or a list "
            f"that keeps every S_t, {self.t * self.d_k * self.d_v} numbers) is what the recurrence avoids: keep one "
            "S and update it, token by token"
        )
        self._refuse_with(message)


def _recurrence_memory(case: dict) -> _RecurrenceMemory:
    return _RecurrenceMemory(case["q"].shape[0], case["k"].shape[1], case["v"].shape[1])


@exercise(
    reference=_reference_recurrence,
    cases=lambda: _cases(100),
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(
            _at_length,
            sizes=(4, 32),
            low=0.7,
            size_name="T",
            expect="This exercise is the recurrence itself: one write and one read per token, in a Python loop over t "
            "(a parallel form, whose count does not grow with T, is the next exercise).",
        ),
        work=(
            WorkCount(
                _recurrence_at_length,
                sizes=_COST_LENGTHS,
                high=_COST_HIGH,
                affine=True,
                expect="A recurrence does the same work for every token, whatever t: its work grows like T.",
            ),
        ),
        watch=_recurrence_memory,
        why="keep the state S and update it, S_t = S_{t-1} + k_t v_tᵀ, then read o_t = S_tᵀ q_t, token by token; a "
        "loop that re-reads every earlier key and value at each step keeps no state and costs T²",
    ),
)
def check_fast_weight_recurrence(fast_weight_recurrence: Callable) -> bool:
    """Check ``fast_weight_recurrence(q, k, v)``: ``S_t = S_{t-1} + k_t v_tᵀ`` then ``o_t = S_tᵀ q_t``, for every t,
    token by token (a loop over t: its operations grow with ``T``), keeping the state: the work of its torch
    operations at ``T = 64``, ``128`` and ``256`` must be exactly linear, and what it holds at once may not grow to one
    state per token (:class:`_RecurrenceMemory`) (a loop that re-reads the whole prefix at each step,
    ``(q_t K_{≤t}ᵀ) V_{≤t}``, computes the same outputs with no state, with work that grows like ``T²``)."""


_NO_LOOP = (
    "The parallel form is a few matrix products and a mask whatever T; a Python loop over the tokens runs operations "
    "for each of them."
)


@exercise(
    reference=_reference_parallel,
    cases=lambda: _cases(200),
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(_at_length, sizes=(4, 32), high=0.3, size_name="T", expect=_NO_LOOP),
        inputs_unchanged=True,
        why="build the masked score matrix and multiply it by V, no loop",
    ),
)
def check_causal_linear_attention(causal_linear_attention: Callable) -> bool:
    """Check ``causal_linear_attention(q, k, v) = (Q Kᵀ ⊙ M) V`` with ``M`` causal, diagonal included, without a
    loop over the tokens."""


def _normalized_cases() -> Iterator[dict]:
    yield from _cases(300, positive=True)
    # Tiny features: zᵀq is about 1e-7, below ε = 1e-6, so an answer without ε is far off (not only by rounding).
    g = torch.Generator().manual_seed(350)
    q, k = (1e-4 * torch.rand(6, 3, generator=g, dtype=torch.float64) for _ in range(2))
    yield {"q": q, "k": k, "v": torch.randn(6, 2, generator=g, dtype=torch.float64)}


@exercise(
    reference=_reference_normalized,
    cases=_normalized_cases,
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(_positive_at_length, sizes=(4, 32), high=0.3, size_name="T", expect=_NO_LOOP),
        inputs_unchanged=True,
        why="divide the masked scores' products by their row sums plus ε, in the parallel form",
    ),
    given=(elu_plus_one,),  # the feature map the chapter hands out; the operation-count cases are built with it
)
def check_normalized_linear_attention(normalized_linear_attention: Callable) -> bool:
    """Check ``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)`` with ``z_t = Σ_{i≤t} k_i`` in the parallel form (on positive
    features; one case has features so small that forgetting ``ε`` changes the answer)."""


def _chunk_cases() -> Iterator[dict]:
    # (T, D_k, D_v, C): T a multiple of C, T not a multiple (a short last chunk), C = 1 (the recurrence), C ≥ T (the
    # parallel form), and several chunks with D_k ≠ D_v; then correlated keys, and float32.
    for i, (t, d_k, d_v, c) in enumerate([(8, 3, 2, 4), (10, 4, 3, 4), (5, 3, 4, 1), (6, 2, 3, 16), (33, 6, 5, 8)]):
        yield {**_sequence(t, d_k, d_v, torch.Generator().manual_seed(400 + i)), "chunk_size": c}
    yield {**_sequence(20, 5, 4, torch.Generator().manual_seed(410), correlated=True), "chunk_size": 6}
    yield {**_sequence(19, 4, 6, torch.Generator().manual_seed(411), dtype=torch.float32), "chunk_size": 4}


def _chunk_with_short_tail(chunk_size: int) -> dict:
    """One full chunk and a short last one of ``C − 1`` tokens (``T = 2C − 1``), for the operation count of 2.3: a
    chunk form runs two chunks at every chunk size, the short one like the full one, so as many operations at
    ``C = 2`` as at ``C = 16``; a loop over single tokens, over the whole sequence or only over the short last chunk,
    runs some for each of its tokens, more at the larger ``C`` (growth exponent about 1 and 0.8, against 0)."""
    return {
        **_sequence(2 * chunk_size - 1, 4, 3, torch.Generator().manual_seed(450 + chunk_size)),
        "chunk_size": chunk_size,
    }


#: what the operation count of 2.3 and 2.5 expects, in the refusal's words
_ONE_CHUNK_AND_A_SHORT_ONE = (
    "With the number of chunks fixed (one full chunk and a short last one of C − 1 tokens here, T = 2C − 1), a chunk "
    "form runs as many operations at every chunk size, whether it takes one step per chunk or handles all chunks at "
    "once: the short last chunk is a chunk like the others. A loop over single tokens, for the whole sequence or for "
    "the short last chunk, runs some for each token, more at the larger C."
)


class _ChunkSizes(_OneModeWatch):
    """The memory rule of the chunk form, for one case: no intermediate tensor may hold more than twice the largest
    array the chunk form itself holds: the scores of all ``n = ⌈T / C⌉`` chunks (``n C²``), their states
    (``n D_k D_v``) or their rows (``n C (D_k + D_v)``), whether it keeps them one chunk at a time or all at once. A
    ``T × T`` score matrix is ``T / C`` times larger than the scores of all chunks, one state per token ``C`` times
    larger than the states of all chunks.

    Entered around each call of the answer (:attr:`ttr_edu.checks._rules.Rules.watch`); ``hit`` is the broken rule's
    message (also raised as :class:`ForbiddenCall`, so that the answer stops there)."""

    def __init__(self, t: int, d_k: int, d_v: int, chunk_size: int) -> None:
        n = math.ceil(t / chunk_size)
        self.t, self.d_k, self.d_v, self.chunk_size, self.n = t, d_k, d_v, chunk_size, n
        self.largest = max(n * chunk_size**2, n * d_k * d_v, n * chunk_size * (d_k + d_v))
        self.hit = None
        rules = self

        class Sizes(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False  # nothing compiles inside an answer: no Dynamo guard (its first import takes seconds)

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for tensor in out if isinstance(out, (tuple, list)) else (out,):
                    if isinstance(tensor, torch.Tensor) and tensor.numel() > 2 * rules.largest:
                        rules._refuse(tensor)
                return out

        self._mode = Sizes()

    def _refuse(self, tensor: torch.Tensor) -> None:
        shape = " × ".join(map(str, tensor.shape))
        message = (
            f"your function built a {shape} tensor ({tensor.numel()} numbers) on T = {self.t} tokens in chunks of "
            f"C = {self.chunk_size}; the chunk form never holds more than the scores of all {self.n} chunks "
            f"({self.n} × {self.chunk_size} × {self.chunk_size}), their states ({self.n} × {self.d_k} × {self.d_v}) "
            f"or their rows, {self.largest} numbers at most (twice that is allowed). A T × T score matrix, or one "
            "state per token (a cumulative sum of the outer products k_t v_tᵀ), is what the chunks avoid"
        )
        self._refuse_with(message)


def _chunk_sizes(case: dict) -> _ChunkSizes:
    return _ChunkSizes(case["q"].shape[0], case["k"].shape[1], case["v"].shape[1], case["chunk_size"])


def _chunk_at_length(t: int) -> dict:
    """``T`` tokens of width 16 in chunks of 8, for the cost rule of the chunk form: at ``T = 128`` to ``512`` (16
    to 64 chunks) re-summing the prefix (``T² d² / C``) outweighs the chunk form's own work (``T C d + T d²``)."""
    return {**_sequence(t, 16, 16, torch.Generator().manual_seed(t)), "chunk_size": 8}


@exercise(
    reference=_reference_chunk,
    cases=_chunk_cases,
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(
            _chunk_with_short_tail,
            sizes=(2, 16),
            high=0.5,
            size_name="chunk_size",
            expect=_ONE_CHUNK_AND_A_SHORT_ONE,
        ),
        work=(
            WorkCount(
                _chunk_at_length,
                sizes=_CHUNK_LENGTHS,
                high=_COST_HIGH,
                affine=True,
                expect="A chunk form does the same work for every chunk, whatever its position: its work grows like T.",
            ),
        ),
        watch=_chunk_sizes,
        why="carry the state S from chunk to chunk (a loop over the chunks, or a cumulative sum of the chunks' "
        "states) and use T × T products nowhere: re-summing every earlier token in each chunk, or slicing a T × T "
        "matrix, costs T²",
    ),
)
def check_chunk_linear_attention(chunk_linear_attention: Callable) -> bool:
    """Check ``chunk_linear_attention(q, k, v, chunk_size)``: per chunk ``O_n = Q_n S_n + (Q_n K_nᵀ ⊙ M) V_n``,
    ``S_{n+1} = S_n + K_nᵀ V_n``; any ``T`` (the last chunk may be short).

    Beyond the values, the check holds the answer to what a chunk form does, however it is written (a loop over the
    chunks, or all chunks at once with a cumulative sum of their states):

    * its operations, counted on one full chunk and a short last one of ``C − 1`` tokens at ``C = 2`` and ``C = 16``:
      as many at both for a chunk form, which handles the short chunk as a chunk; more at the larger ``C`` for a loop
      over single tokens, whether over the whole sequence or only over the short last chunk;
    * its intermediate tensors (:class:`_ChunkSizes`): none larger than twice the chunk form's own largest array (the
      scores, states or rows of all chunks), so no ``T × T`` matrix and no state per token;
    * the work of its torch operations (elements read and written, plus the multiply-adds of matrix products) at
      ``T = 128``, ``256`` and ``512`` in chunks of 8: exactly linear in ``T``; one that re-sums the prefix in every
      chunk, grows its output by ``torch.cat``, or slices a ``T × T`` matrix, is not.

    Such answers are refused with a message that says which rule they break.
    """


# -- Exercise 2.5: the normaliser in chunks (derived) -----------------------------------------------------------------


def _reference_normalized_chunk(q, k, v, chunk_size):
    """``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)``, whatever the chunk size: the package's normalised form on one head."""
    return _reference_normalized(q, k, v)


def _normalized_chunk_cases() -> Iterator[dict]:
    """Positive features of several norms (scaled by 1e-3 to 30: at 1e-3 the denominator is far below ε, so ε's
    place matters), correlated keys, the chunk sizes of 2.3 (a short last chunk, C = 1, C ≥ T), a long sequence of
    small chunks (16 chunks of 4: the earlier chunks' part ``z_nᵀ q_t`` makes most of every late denominator, so a
    float32 rounding of it shows at the check's float64 tolerance of 1e-9), and float32."""
    for i, (t, d_k, d_v, c, scale) in enumerate(
        [(8, 3, 2, 4, 1.0), (10, 4, 3, 4, 30.0), (5, 3, 4, 1, 1.0), (6, 2, 3, 16, 0.3), (33, 6, 5, 8, 1.0),
         (9, 3, 2, 4, 1e-3), (64, 4, 3, 4, 1.0)]
    ):  # fmt: skip
        case = _sequence(t, d_k, d_v, torch.Generator().manual_seed(500 + i), positive=True)
        yield {**case, "q": scale * case["q"], "k": scale * case["k"], "chunk_size": c}
    yield {**_sequence(20, 5, 4, torch.Generator().manual_seed(510), positive=True, correlated=True), "chunk_size": 6}
    yield {**_sequence(19, 4, 6, torch.Generator().manual_seed(511), positive=True, dtype=torch.float32),
           "chunk_size": 4}  # fmt: skip


def _float32_part_note(message: str, case: dict, result: object) -> str:
    """On float64 inputs, a float64 result that agrees with the reference only to float32's rounding: say that part
    of it was computed in float32 (``_dtype_lead`` names a result computed wholly in float32 and widened; this is a
    part of it, e.g. the denominator's ``z_nᵀ q_t``, whose float32 rounding stays below the default tolerance)."""
    if not (isinstance(result, torch.Tensor) and result.dtype == case["q"].dtype == torch.float64):
        return ""
    want = _reference_normalized_chunk(**case)
    if result.shape != want.shape or not bool(torch.isfinite(result).all()):
        return ""
    error = ((result - want).norm() / want.norm()).item()
    if not 1e-12 < error <= 100 * torch.finfo(torch.float32).eps:
        return ""
    return (
        f"\n  on float64 inputs your result is within {error:.0e} of the reference: float32's rounding, not float64's. "
        "Part of it was computed in float32 (a .float(), or a tensor made with dtype=torch.float32); the exercise "
        "works in float64 throughout, and the check compares to 1e-9"
    )


def _positive_chunk_at_size(chunk_size: int) -> dict:
    """As :func:`_chunk_with_short_tail`, on positive features: one full chunk and a short last one."""
    t = 2 * chunk_size - 1
    return {
        **_sequence(t, 4, 3, torch.Generator().manual_seed(550 + chunk_size), positive=True),
        "chunk_size": chunk_size,
    }


def _positive_chunk_at_length(t: int) -> dict:
    return {**_sequence(t, 16, 16, torch.Generator().manual_seed(t), positive=True), "chunk_size": 8}


@exercise(
    reference=_reference_normalized_chunk,
    cases=_normalized_chunk_cases,
    rtol=1e-9,
    explain=_float32_part_note,
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(
            _positive_chunk_at_size,
            sizes=(2, 16),
            high=0.5,
            size_name="chunk_size",
            expect=_ONE_CHUNK_AND_A_SHORT_ONE,
        ),
        work=(
            WorkCount(
                _positive_chunk_at_length,
                sizes=_CHUNK_LENGTHS,
                high=_COST_HIGH,
                affine=True,
                expect="A chunk form does the same work for every chunk, whatever its position: its work grows like T, "
                "the normaliser's as well as the numerator's.",
            ),
        ),
        watch=_chunk_sizes,
        why="split the normaliser as 2.3 splits the numerator: what the earlier chunks' keys give, carried from chunk "
        "to chunk, plus what the chunk's own keys up to t give; no T × T matrix, no re-summing of the prefix",
    ),
    given=(elu_plus_one,),  # the operation-count and work cases are built with it where the answer runs
)
def check_normalized_chunk_linear_attention(normalized_chunk_linear_attention: Callable) -> bool:
    """Check ``normalized_chunk_linear_attention(q, k, v, chunk_size)``: ``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)`` in
    the chunk form, on positive features of several norms (at the smallest the denominator is far below ``ε``),
    correlated keys, a short last chunk, ``C = 1``, ``C ≥ T``, 16 small chunks and float32, held to the chunk form's
    rules of 2.3 (operations at two chunk sizes, no tensor larger than the chunks' own, work linear in ``T``). Float64
    cases are compared to ``rtol = 1e-9``, so a part computed in float32 (the earlier chunks' ``z_nᵀ q_t`` read in
    float32 and cast back) fails, and is told so.

    The derivation's slips fail on values: the chunk's own token left out of its denominator (a strict mask), the
    chunk's keys counted twice (its ``z`` read after its own writes), the column sums of the masked scores instead of
    their row sums, a ``z`` restarted in every chunk, the ``z`` of the whole sequence, and ``ε`` left out."""
