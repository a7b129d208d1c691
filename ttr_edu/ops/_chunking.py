"""What the chunk forms share: a sequence cut into chunks of ``C`` tokens, the chunks taken a block at a time, read
in the caller's layout and computed in buffers that every block reuses.

A chunk form does its batched products for a block of chunks at once, and only the chunk-to-chunk state update in a
loop. Three rules keep the data movement down (moving data between layouts cost a third to a half of the
time on some machines):

* **Strided views in, one pass.** :func:`chunk_blocks` hands out each block as strided views of the caller's
  ``(B, T, H, ·)`` tensors, shaped ``(n, B, H, C, ·)``; nothing is gathered. A form packs what its products need into
  contiguous ``(n·B·H, C, ·)`` matrices with the elementwise op it must do anyway (``β K``, ``γ Q``, ``K / γ``), so
  an input is read once, and a plain copy is left only where the maths has no such op (``K`` of the delta rule).
* **One pass out.** The output's two terms (``Q S`` and the masked scores times the values) are added straight
  into the caller's ``(B, T, H, D_v)`` layout (:func:`store`), with no gathered copy of ``o`` and no concatenation.
* **Buffers reused.** Under ``torch.no_grad`` (or when no input requires a gradient) every block writes its
  intermediates into the same few buffers (:class:`Scratch`, products with ``out=``, updates in place). A block of a
  few thousand rows keeps them in the CPU's cache, and a fresh buffer per block would cost page faults on first touch
  (which the profiler then books to the copy that touches it). When autograd records the call, the same code runs
  out of place (``Scratch`` hands out no buffers, :func:`store` copies into the output).

Used by :func:`ttr_edu.ops.delta_rule.chunk_forward` (the delta rule, gated delta rule, DeltaProduct and Longhorn),
:func:`ttr_edu.ops.linear_attention_chunk`, :func:`ttr_edu.ops.gated_linear_attention_chunk` and
:func:`ttr_edu.ops.gla_chunk`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

#: Rows of ``q`` per block of chunks (chunks × C × B·H): 8 chunks of 64 tokens at B·H = 8, buffers of 1 MiB each at
#: D = 64. One core of a 2-core Xeon (2 MiB L2), B·H = 8, D = 64, T = 1024 and 4096, the other core idle,
#: four interleaved comparisons of 5–7 rounds: against 2048 rows, linear attention, both gated linear attentions and
#: the gated delta rule ran 4–19 % faster, ``delta_rule_chunk`` from 2 % slower to 11 % faster; 16384 rows ran
#: slower (its buffers outgrow the cache). The best size depends on cache pressure: with a test run busy on the
#: other core, a review measured 2048 rows faster for ``delta_rule_chunk`` (4–10 %).
BLOCK_ROWS = 4096


#: The smallest chunk decay ``γ_C = exp(Σ g)`` for which a block of a gated form factorises its decay matrix,
#: ``Γ_ij = γ_i / γ_j``: then ``1/γ ≤ e⁸`` cannot overflow and ``Γ`` carries at most 2·8 units of rounding.
MIN_FACTORED_DECAY = math.exp(-8.0)


def run_blocks(
    block_forward: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    inputs: list[torch.Tensor],
    S: torch.Tensor,
    chunk_size: int,
    **options,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The one loop of every chunk form: the chunks of ``inputs`` a block at a time through ``block_forward``.

    Args:
        block_forward: ``block_forward(*views, state=, scratch=, **options) -> (inter, intra, state)``, one block
            of ``n`` chunks from its ``(n, B, H, C, ·)`` views (:func:`chunk_blocks`) and the state before it
            ``(B·H, D_k, D_v)``, returning the output's two terms ``(n, B, H, C, D_v)`` and the state after it.
        inputs: ``k, v, q`` and the form's per-token tensors in the fla layout ``(B, T, H, ·)`` / ``(B, T, H)``.
        S: the state before the first token, ``(B, H, D_k, D_v)``.
        chunk_size: ``C``.
        options: passed to ``block_forward`` (``scale``).

    Returns:
        ``o`` ``(B, T, H, D_v)``, written where it lies (:func:`store`), and ``S_T`` ``(B, H, D_k, D_v)``.
    """
    B, T, H = inputs[0].shape[:3]
    D_k, D_v = S.shape[-2:]
    fast = no_grad_needed(S, *inputs)
    scratch = Scratch(fast, inputs[2])
    o = inputs[2].new_empty(B, T, H, D_v)
    state = S.reshape(B * H, D_k, D_v)
    for t0, t1, views in chunk_blocks(inputs, chunk_size, chunks_per_block(B, H, chunk_size)):
        inter, intra, state = block_forward(*views, state=state, scratch=scratch, **options)
        store(output_view(o, t0, t1, chunk_size), inter, intra)
    if fast:
        state = state.clone()  # not a view of the block's buffer
    return o, state.unflatten(0, (B, H))


def chunks_per_block(B: int, H: int, chunk_size: int) -> int:
    """How many chunks make one block: ``BLOCK_ROWS`` rows of ``q``, at least one chunk."""
    return max(1, BLOCK_ROWS // (B * H * chunk_size))


def even_chunk_size(T: int, largest: int = 64) -> int:
    """The chunk size ``≤ largest`` that cuts ``T`` tokens into the fewest chunks, as equal as can be: the last chunk
    is then padded by fewer than that many tokens. ``T = 96``: 2 chunks of 48 (64 would pad 32 zero tokens, whose
    products cost a third more than the readout of :func:`ttr_edu.ops.rls_exact` needs at the MQAR grid's size)."""
    n_chunks = -(-T // largest)
    return -(-T // n_chunks)


def as_chunks(x: torch.Tensor, rows: int) -> torch.Tensor:
    """A view of ``x`` ``(B, n·rows, H, ·)`` (or per-token ``(B, n·rows, H)``) as ``(n, B, H, rows, ·)``: chunk i of
    head h of sequence b is ``[i, b, h]``, a matrix whose rows are ``H·D`` apart in memory. No copy."""
    x = x.unflatten(1, (-1, rows))  # (B, n, rows, H, ·)
    return x.permute(1, 0, 3, 2, *range(4, x.dim()))


def chunk_blocks(tensors, chunk_size: int, per_block: int):
    """Yield ``(t0, t1, views)``: tokens ``t0 .. t1 − 1`` of the ``(B, T, H, ·)`` / ``(B, T, H)`` ``tensors`` as
    ``(n, B, H, C, ·)`` / ``(n, B, H, C)`` views, ``n ≤ per_block`` whole chunks at a time.

    The whole chunks are views of the tensors themselves. A last, partial chunk comes alone, zero-padded to ``C``
    tokens (a copy of fewer than ``C`` tokens): a zero key or ``β`` writes nothing, a zero log decay keeps the state,
    and its padded outputs are not stored (:func:`output_view`).
    """
    T, C = tensors[0].shape[1], chunk_size
    whole = T // C
    for first in range(0, whole, per_block):
        t0, t1 = first * C, min(first + per_block, whole) * C
        yield t0, t1, [as_chunks(x[:, t0:t1], C) for x in tensors]
    if T % C:
        t0 = whole * C
        pad = lambda x: F.pad(x[:, t0:], [0, 0] * (x.dim() - 2) + [0, C - (T - t0)])  # noqa: E731
        yield t0, T, [as_chunks(pad(x), C) for x in tensors]


def output_view(o: torch.Tensor, t0: int, t1: int, chunk_size: int) -> torch.Tensor:
    """Tokens ``t0 .. t1 − 1`` of the output ``o`` ``(B, T, H, D_v)`` as ``(n, B, H, rows, D_v)``: whole chunks
    (``rows = C``), or the last partial chunk (``n = 1``, ``rows = t1 − t0``)."""
    return as_chunks(o[:, t0:t1], min(chunk_size, t1 - t0))


def store(dest: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> None:
    """``dest = first + second`` for a block's two output terms ``(n, B, H, C, D_v)``: added straight into ``dest``,
    a strided view of the output from :func:`output_view` (of ``rows ≤ C`` rows, the padded rows dropped), in the
    output's dtype. Out of place (a copy into the view, which autograd records) when either term needs a gradient."""
    rows = dest.shape[-2]
    first, second = first[..., :rows, :], second[..., :rows, :]
    if torch.is_grad_enabled() and (first.requires_grad or second.requires_grad):
        dest.copy_(first + second)
    else:
        torch.add(first, second, out=dest)


def no_grad_needed(*tensors) -> bool:
    """Whether nothing of this call is recorded by autograd: then the blocks may reuse buffers and work in place."""
    return not torch.is_grad_enabled() or not any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)


class Scratch:
    """Buffers that every block of one call reuses, by name; or none at all (``enabled=False``, under autograd).

    ``scratch("K", rows, C, D)`` is a contiguous ``(rows, C, D)`` view of the buffer ``"K"``, made on its first
    request (the first block is the largest) and sliced along the first dim for smaller blocks; ``None`` when
    disabled, which makes every ``out=scratch(...)`` in the forms an ordinary out-of-place call.
    """

    def __init__(self, enabled: bool, like: torch.Tensor) -> None:
        self.enabled = enabled
        self.dtype, self.device = like.dtype, like.device
        self.buffers: dict[str, torch.Tensor] = {}

    def __call__(self, name: str, rows: int, *shape: int) -> torch.Tensor | None:
        if not self.enabled:
            return None
        buf = self.buffers.get(name)
        if buf is None or buf.shape[0] < rows or tuple(buf.shape[1:]) != shape:
            buf = self.buffers[name] = torch.empty(rows, *shape, dtype=self.dtype, device=self.device)
        return buf[:rows]


def pack(op, x: torch.Tensor, *args, out: torch.Tensor | None) -> torch.Tensor:
    """``op(x, *args)`` for a block's ``(n, B, H, r, c)`` view ``x``, as contiguous matrices ``(n·B·H, r, c)``.

    With a buffer ``out`` ``(n·B·H, r, c)`` the op writes into it, reading ``x`` where it lies (the one pass over
    this input); without one (under autograd) the result is made contiguous. ``op`` is an elementwise torch function
    taking ``out=`` (``torch.mul``, ``torch.div``), or ``None`` for a plain copy.
    """
    if out is None:
        result = x.contiguous() if op is None else op(x, *args)
        return result.reshape(-1, *x.shape[-2:])
    dest = out.view(x.shape)
    if op is None:
        dest.copy_(x)
    else:
        op(x, *args, out=dest)
    return out


def chunk_states(state, k_end, v, *, n: int, write_scale=None, decay=None, scratch: Scratch):
    """The only sequential part of a block of ``n`` chunks of (gated) linear attention:
    ``S_{i+1} = diag(γ_C,i) S_i + K̃_iᵀ V_i``, each chunk's write decayed to its end.

    Args:
        state: ``(B·H, D_k, D_v)``, the state before the block.
        k_end: ``(n·B·H, C, D_k)``, the keys ``K̃`` whose product with ``V`` is each chunk's write.
        v: ``(n·B·H, C, D_v)``.
        write_scale: ``None``, or a factor broadcast over the writes (``(n·B·H, D_k or 1, 1)``).
        decay: ``None`` (no decay: a running sum), or ``γ_C`` per chunk ``(n, B·H, D_k or 1, 1)``.
        scratch: with buffers, the states are written in one ``(n + 1)·B·H`` buffer in place; without (under
            autograd), out of place.

    Returns ``(starts, state)``: the state each chunk starts with, ``(n·B·H, D_k, D_v)``, and the state after the
    block, ``(B·H, D_k, D_v)``.
    """
    BH = state.shape[0]
    states = scratch("states", n * BH + BH, state.shape[1], v.shape[-1])
    if states is not None:
        chain = states.view(n + 1, BH, *state.shape[1:])
        if chain[0].data_ptr() != state.data_ptr():
            chain[0].copy_(state)
        writes = torch.bmm(k_end.mT, v, out=states[BH:])
        if write_scale is not None:
            writes.mul_(write_scale)
        for i in range(n):  # one op per chunk (a cumsum over the chunk dim is a slow element-wise scan)
            if decay is None:
                chain[i + 1].add_(chain[i])
            else:
                chain[i + 1].addcmul_(chain[i], decay[i])
        return states[: n * BH], chain[n]
    writes = torch.bmm(k_end.mT, v)
    if write_scale is not None:
        writes = writes * write_scale
    writes, starts = writes.unflatten(0, (n, BH)), []
    for i in range(n):
        starts.append(state)
        state = writes[i] + (state if decay is None else decay[i] * state)
    return torch.cat(starts), state


def scaled_bmm(a: torch.Tensor, b: torch.Tensor, scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """``scale · (a @ b)`` for batches of matrices, the scale applied by the product itself (``baddbmm`` with
    ``beta = 0``: as fast as ``bmm``, where a multiply after it would be one more pass); into ``out`` when given."""
    if scale == 1.0:
        return torch.bmm(a, b, out=out)
    dest = out if out is not None else a.new_empty(a.shape[0], a.shape[1], b.shape[-1])
    return torch.baddbmm(dest, a, b, beta=0.0, alpha=scale, out=out)
