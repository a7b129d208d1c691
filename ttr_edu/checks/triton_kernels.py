"""Checks for chapter 10, Triton kernels, puzzle style (after Triton-Puzzles).

The student writes a ``@triton.jit`` kernel; its check launches it on seeded random inputs (CPU tensors, in Triton's
interpreter) and compares the result with a plain PyTorch **spec**, reporting the first wrong element.

Two guards make the usual kernel bugs visible:

* every input and output sits inside a band of NaN in memory, so an unmasked read past the end turns into NaN in the
  result (a wrong element), and a write past the end of an output is reported by name (inputs and outputs use NaNs
  with different bit patterns, so even copying an input's NaN into an output's band is seen);
* outputs start as NaN, so an element the kernel never writes is a wrong element too.

No Triton import happens here: launching a kernel needs only the kernel object.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from ttr_edu import ops
from ttr_edu.checks._core import CheckFailed, run_check
from ttr_edu.checks.chunkwise_algorithms import ut_transform_spec

__all__ = [
    "check_scale_tile",
    "check_causal_chunk",
    "check_chunk_linear_attention",
    "check_ut_transform",
    "scale_tile_spec",
    "causal_chunk_spec",
    "chunk_linear_attention_spec",
]

GUARD = 4096  # NaN elements on each side of every tensor handed to a kernel
INPUT_NAN, OUTPUT_NAN = 0x7FC01111, 0x7FC02222  # two quiet-NaN bit patterns (as int32) for the bands


def _pow2(n: int, least: int = 16) -> int:
    """The smallest power of two ≥ max(n, least): tile sides must be powers of two, and tl.dot needs ≥ 16."""
    return max(least, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


class _Guarded:
    """A tensor living in the middle of a NaN-filled buffer; ``.tensor`` is the (contiguous) view."""

    def __init__(self, name: str, shape, values: torch.Tensor | None = None):
        n = math.prod(shape)
        self.name = name
        self.pattern = OUTPUT_NAN if values is None else INPUT_NAN
        self.bits = torch.full((n + 2 * GUARD,), self.pattern, dtype=torch.int32)
        self.tensor = self.bits.view(torch.float32)[GUARD : GUARD + n].view(*shape)
        if values is not None:
            self.tensor.copy_(values)

    def check_untouched(self) -> None:
        bands = torch.cat([self.bits[:GUARD], self.bits[-GUARD:]])
        if not (bands == self.pattern).all():
            written = int((bands != self.pattern).sum())
            raise CheckFailed(
                f"your kernel wrote {written} element(s) outside `{self.name}` (shape {tuple(self.tensor.shape)}): "
                "a store without a mask, or with the wrong one"
            )


def _launch(kernel, grid, *args, **constants) -> None:
    """Launch ``kernel[grid](*args, **constants)``; an unsolved stub surfaces as ``NotImplementedError``."""
    if type(kernel).__name__ != "InterpretedFunction":
        raise RuntimeError(
            "these puzzles run in Triton's interpreter on CPU tensors: set os.environ['TRITON_INTERPRET'] = '1' "
            "before the first `import triton`, then restart the kernel and run the notebook from the top"
        )
    try:
        kernel[grid](*args, **constants)
    except Exception as error:  # the interpreter wraps what the kernel body raised
        if isinstance(error, NotImplementedError) or isinstance(error.__cause__, NotImplementedError):
            raise NotImplementedError() from error
        raise


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 1: a 2-D tile, loaded and stored with masks.


def scale_tile_spec(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``out = scale · x`` for ``x`` of shape ``(T, D)``."""
    return scale * x


def check_scale_tile(kernel) -> bool:
    """Check ``kernel(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr)``.

    Launched on ``cdiv(T, BLOCK_T)`` programs with ``BLOCK_T = 4`` and ``BLOCK_D`` the next power of two ≥ D,
    program ``i`` owning rows ``[i·BLOCK_T, (i+1)·BLOCK_T)``; it must write ``out = scale · x``.
    """

    def launch(x, scale):
        T, D = x.shape
        x_in, out = _Guarded("x", (T, D), x), _Guarded("out", (T, D))
        _launch(kernel, (math.ceil(T / 4),), x_in.tensor, out.tensor, T, D, scale, BLOCK_T=4, BLOCK_D=_pow2(D, 1))
        out.check_untouched()
        return out.tensor.clone()

    def cases() -> Iterator[dict]:
        for i, (T, D) in enumerate([(4, 4), (5, 3), (9, 16), (1, 1), (13, 7)]):
            yield {"x": torch.randn(T, D, generator=_generator(1000 + i)), "scale": 0.5 + i}

    return run_check("scale_tile", launch, scale_tile_spec, cases(), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 2: tl.dot, the causal product inside one chunk.


def causal_chunk_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``(Q Kᵀ ⊙ M) V`` for one chunk, ``M`` the causal mask with its diagonal: ``q, k`` ``(C, D_k)``, ``v``
    ``(C, D_v)``."""
    return torch.tril(q @ k.T) @ v


def check_causal_chunk(kernel) -> bool:
    """Check ``kernel(q_ptr, k_ptr, v_ptr, out_ptr, C, D_k, D_v, BLOCK_C, BLOCK_K, BLOCK_V)`` (block sizes constexpr).

    One program (grid ``(1,)``); ``C ≤ BLOCK_C``; it must write ``out = (Q Kᵀ ⊙ M) V``.
    """

    def launch(q, k, v):
        (C, d_k), d_v = q.shape, v.shape[1]
        guarded = [_Guarded(n, t.shape, t) for n, t in (("q", q), ("k", k), ("v", v))]
        out = _Guarded("out", (C, d_v))
        _launch(kernel, (1,), *(g.tensor for g in guarded), out.tensor, C, d_k, d_v,
                BLOCK_C=16, BLOCK_K=_pow2(d_k), BLOCK_V=_pow2(d_v))
        out.check_untouched()
        return out.tensor.clone()

    def cases() -> Iterator[dict]:
        for i, (C, d_k, d_v) in enumerate([(16, 16, 16), (10, 5, 7), (16, 32, 8), (1, 3, 2), (13, 20, 24)]):
            g = _generator(1100 + i)
            yield {"q": torch.randn(C, d_k, generator=g), "k": torch.randn(C, d_k, generator=g),
                   "v": torch.randn(C, d_v, generator=g)}

    return run_check("causal_chunk", launch, causal_chunk_spec, cases(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 3: a loop over chunks carrying the state.


def chunk_linear_attention_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """Causal linear attention on one head from a zero state, ``scale = 1``: returns ``(o, S_T)``."""
    o, S = ops.linear_attention_recurrent(q[None, :, None], k[None, :, None], v[None, :, None], scale=1.0,
                                          output_final_state=True)
    return o[0, :, 0], S[0, 0]


def check_chunk_linear_attention(kernel) -> bool:
    """Check ``kernel(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, T, D_k, D_v, BLOCK_T, BLOCK_K, BLOCK_V)``.

    One program (grid ``(1,)``) walks the chunks of ``BLOCK_T = 16`` tokens with the state ``S`` ``(D_k, D_v)`` in
    registers, starting from zero; it writes ``o`` ``(T, D_v)`` and the final state to ``s_ptr``.
    """

    def launch(q, k, v):
        (T, d_k), d_v = q.shape, v.shape[1]
        guarded = [_Guarded(n, t.shape, t) for n, t in (("q", q), ("k", k), ("v", v))]
        o, S = _Guarded("o", (T, d_v)), _Guarded("s", (d_k, d_v))
        _launch(kernel, (1,), *(g.tensor for g in guarded), o.tensor, S.tensor, T, d_k, d_v,
                BLOCK_T=16, BLOCK_K=_pow2(d_k), BLOCK_V=_pow2(d_v))
        for out in (o, S):
            out.check_untouched()
        return o.tensor.clone(), S.tensor.clone()

    def cases() -> Iterator[dict]:
        for i, (T, d_k, d_v) in enumerate([(16, 16, 16), (37, 8, 12), (1, 4, 4), (50, 16, 20)]):
            g = _generator(1200 + i)
            yield {"q": torch.randn(T, d_k, generator=g), "k": torch.randn(T, d_k, generator=g) / d_k**0.5,
                   "v": torch.randn(T, d_v, generator=g)}

    return run_check("chunk_linear_attention", launch, chunk_linear_attention_spec, cases(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 4: the UT transform by forward substitution.


def check_ut_transform(kernel) -> bool:
    """Check ``kernel(k_ptr, beta_ptr, out_ptr, C, D_k, BLOCK_C, BLOCK_K)`` against
    :func:`ttr_edu.checks.chunkwise_algorithms.ut_transform_spec`: ``out`` ``(C, C)`` is ``(I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)``.

    One program (grid ``(1,)``), ``C ≤ BLOCK_C = 16``.
    """

    def launch(k, beta):
        C, d_k = k.shape
        k_in, beta_in, out = _Guarded("k", k.shape, k), _Guarded("beta", beta.shape, beta), _Guarded("out", (C, C))
        _launch(kernel, (1,), k_in.tensor, beta_in.tensor, out.tensor, C, d_k, BLOCK_C=16, BLOCK_K=_pow2(d_k))
        out.check_untouched()
        return out.tensor.clone()

    def cases() -> Iterator[dict]:
        for i, (C, d_k) in enumerate([(16, 16), (5, 3), (1, 4), (12, 20)]):
            g = _generator(1300 + i)
            k = torch.randn(C, d_k, generator=g)
            yield {"k": k / k.norm(dim=-1, keepdim=True), "beta": torch.rand(C, generator=g)}

    return run_check("ut_transform", launch, ut_transform_spec, cases(), rtol=1e-4, atol=1e-5)
