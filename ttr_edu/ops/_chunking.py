"""What the chunk forms share: a sequence cut into chunks of ``C`` tokens, the chunks taken a block at a time.

A chunk form does its batched products for many chunks at once, and only the chunk-to-chunk state update in a loop.
Taking *all* chunks at once made those products stream over 100 MB of intermediates at ``T = 4096``, ``B·H = 8``,
``D = 64`` (out to main memory and back, 1.6× slower on one core); a block of chunks keeps them in the CPU's cache.
:func:`chunks_per_block` sizes the block and :func:`chunk_blocks` gathers it from fla's layout in one pass. Used by
:func:`ttr_edu.ops.delta_rule.chunk_forward` (the delta rule, gated delta rule, DeltaProduct and Longhorn),
:func:`ttr_edu.ops.linear_attention_chunk`, :func:`ttr_edu.ops.gated_linear_attention_chunk` and
:func:`ttr_edu.ops.gla_chunk`.
"""

from __future__ import annotations

#: Rows of ``q`` per block of chunks (chunks × C × B·H): about 1.5 MiB of fp32 ``[K V Q]`` at ``D = 64``. The delta
#: rule's chunk form ran at the same speed for 2048 to 8192 rows (``T = 4096``, ``B·H = 8``, one core), 1.3× slower at
#: 16384 and 1.6× slower with all chunks at once (32768 rows); the linear-attention forms were tuned at 2048.
BLOCK_ROWS = 2048


def chunks_per_block(B: int, H: int, chunk_size: int, *, row_weight: int = 1) -> int:
    """How many chunks make one block: ``BLOCK_ROWS / row_weight`` rows of ``q``, at least one chunk.

    ``row_weight`` is for a form whose intermediates per row are several times those of the others: per-key GLA
    (:func:`ttr_edu.ops.gla_chunk`) keeps a ``(sub, sub, D_k)`` decay tensor per sub-chunk, 16× the size of ``q``
    against the ``C``-wide score rows of the scalar-gate forms, and takes ``row_weight = 2``.
    """
    return max(1, BLOCK_ROWS // (row_weight * B * H * chunk_size))


def even_chunk_size(T: int, largest: int = 64) -> int:
    """The chunk size ``≤ largest`` that cuts ``T`` tokens into the fewest chunks, as equal as can be: the last chunk
    is then padded by fewer than that many tokens. ``T = 96``: 2 chunks of 48 (64 would pad 32 zero tokens, whose
    products cost a third more than the readout of :func:`ttr_edu.ops.rls_exact` needs at the MQAR grid's size)."""
    n_chunks = -(-T // largest)
    return -(-T // n_chunks)


def chunk_blocks(tensors, chunk_size: int, per_block: int):
    """Yield ``(first, last, block)``: chunks ``first .. last − 1`` of heads-first ``(B, H, T, ·)`` (or per-token
    ``(B, H, T)``) tensors as one contiguous ``(n, B, H, C, W)`` tensor, ``n ≤ per_block``.

    The tensors' last dims lie side by side (W in all), the last chunk is zero-padded, and each chunk of each head is
    one matrix, ready for batched products. Each block is gathered in one pass over rows of ``D`` numbers: the
    heads-first inputs are usually transposed views of fla's ``(B, T, H, ·)``, which are contiguous again after
    ``transpose(1, 2)``. Gathering from the strided heads-first views instead, or packing the whole sequence into one
    large fresh buffer, cost a third of the chunk form's time on one core.
    """
    B, H, T = tensors[0].shape[:3]
    C = chunk_size
    columns = [(x.unsqueeze(-1) if x.dim() == 3 else x).transpose(1, 2) for x in tensors]  # (B, T, H, w)
    width = sum(x.shape[-1] for x in columns)
    n_chunks = -(-T // C)
    for first in range(0, n_chunks, per_block):
        last = min(first + per_block, n_chunks)
        t0, t1 = first * C, min(last * C, T)
        full, tail = divmod(t1 - t0, C)
        block = columns[0].new_empty(last - first, B, H, C, width)
        dest = block.permute(1, 0, 3, 2, 4)  # (B, n, C, H, W): the inputs' order
        start = 0
        for x in columns:
            cols = slice(start, start + x.shape[-1])
            dest[:, :full, :, :, cols] = x[:, t0 : t0 + full * C].unflatten(1, (full, C))
            if tail:
                dest[:, full, :tail, :, cols] = x[:, t0 + full * C : t1]
            start += x.shape[-1]
        if tail:
            dest[:, full, tail:] = 0  # zero padding: writes nothing, keeps the state
        yield first, last, block
