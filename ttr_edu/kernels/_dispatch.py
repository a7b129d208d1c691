"""Where a kernel may run, how big its tiles are, and the autograd wrapper every kernel shares.

Dispatch:

* CUDA tensors run the compiled kernel;
* CPU tensors run it under Triton's interpreter, which must be switched on with ``TRITON_INTERPRET=1`` *before*
  Triton is imported (``@triton.jit`` reads the variable once, when the kernels are defined);
* anything else raises a ``RuntimeError`` that says how to switch the interpreter on, or which reference op to use.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction

from ttr_edu._internal.validation import Dims, check_cu_seqlens
from ttr_edu.kernels import _triton_kernels

#: The largest D_k a kernel accepts: a program keeps a (D_k, BV) block of the state in registers.
MAX_D_K = 256
#: The largest chunk: a program keeps (C, C) tiles (scores, the UT inverse) in registers.
MAX_CHUNK = 128


def interpreter_active() -> bool:
    """True when the kernels were defined under ``TRITON_INTERPRET=1`` (they then run on CPU tensors)."""
    return isinstance(_triton_kernels.delta_rule_fwd_kernel, InterpretedFunction)


def check_runnable(device: torch.device, reference: str) -> None:
    """Raise unless a kernel can run on tensors living on ``device``: ``RuntimeError`` for CPU tensors without
    Triton's interpreter (the environment, not the input, is at fault), ``ValueError`` naming ``q`` for any other
    device (meta, MPS, ...).

    Args:
        device: the inputs' device.
        reference: the name of the reference op to suggest, e.g. ``"ttr_edu.ops.delta_rule_chunk"``.
    """
    if device.type == "cuda" or (device.type == "cpu" and interpreter_active()):
        return
    if device.type == "cpu":
        raise RuntimeError(
            "Triton kernels run on CPU tensors only in Triton's interpreter, which is off. Switch it on before "
            "Triton is first imported: `TRITON_INTERPRET=1 python ...`, or `import os; "
            "os.environ['TRITON_INTERPRET'] = '1'` in the first cell (in Jupyter, restart the kernel first). "
            f"Or call the reference op {reference}, which computes the same function in PyTorch."
        )
    raise ValueError(
        f"q: Triton kernels run on CUDA tensors (or on CPU tensors in Triton's interpreter), got tensors on "
        f"{device}; call the reference op {reference} instead."
    )


#: Offsets inside one batch element's (T, H, D) slice are 32-bit in the kernels (int64 only per batch element);
#: 2**30 leaves room below 2**31 for the padded lanes of the last chunk and of the D tiles.
MAX_SLICE = 2**30


def check_kernel_sizes(d_k: int, chunk_size: int, reference: str, *, T: int = 1, H: int = 1, d_v: int = 1) -> None:
    """Raise ``ValueError`` for sizes the reference op accepts but a kernel cannot handle: a tile that does not fit
    the registers, or a ``(T, H, D)`` slice too long for the kernels' 32-bit offsets (``d_v`` counts the column of
    ones the normalised linear attention appends)."""
    width = max(d_k, d_v)
    if T * H * width >= MAX_SLICE:
        raise ValueError(
            f"q: the kernels address one batch element's (T, H, D) slice with 32-bit offsets and need "
            f"T * H * max(D_k, D_v) < 2**30, got T = {T}, H = {H}, max(D_k, D_v) = {width}; split the sequence "
            f"into pieces and carry the state with initial_state/output_final_state, or call {reference}"
        )
    if chunk_size < 16 or chunk_size > MAX_CHUNK or chunk_size & (chunk_size - 1):
        raise ValueError(
            f"chunk_size: the kernels need a power of two from 16 (a tl.dot tile side) to {MAX_CHUNK} (C x C tiles "
            f"live in registers), got {chunk_size}; the answer does not depend on it, so pass 16, 32, 64 or 128, "
            f"or call {reference}"
        )
    if d_k > MAX_D_K:
        raise ValueError(
            f"q: the kernels hold a (D_k, BV) state block in registers and accept D_k <= {MAX_D_K}, got D_k = {d_k}; "
            f"call {reference} instead"
        )


def tile_sizes(d_k: int, d_v: int, device: torch.device) -> tuple[int, int]:
    """``(BK, BV)``: all of D_k in one tile; D_v split in tiles of 64 on a GPU (more programs in flight), whole
    under the interpreter (each program costs Python time there)."""
    block_k = max(16, triton.next_power_of_2(d_k))
    block_v = max(16, triton.next_power_of_2(d_v))
    if device.type == "cuda":
        block_v = min(block_v, 64)
    return block_k, block_v


def dot_precision(dtype: torch.dtype, device: torch.device) -> str:
    """``tl.dot``'s input precision.

    * Under the interpreter: ``"ieee"`` (NumPy fp32 products, parity with the references to ~1e-7).
    * On a GPU, fp32/fp64 inputs: ``"tf32x3"``, three tf32 tensor-core products that recover ~fp32 accuracy. (Plain
      ``"ieee"`` lowers to scalar FMAs and, compiled for sm_90, spills ~95 KB per program; ``"tf32"`` alone keeps
      only 10 mantissa bits.)
    * On a GPU, fp16/bf16 inputs: ``"tf32"``, which carries more mantissa bits than the inputs.
    """
    if device.type != "cuda":
        return "ieee"
    return "tf32" if dtype in (torch.float16, torch.bfloat16) else "tf32x3"


def warps_for(block_k: int, block_v: int, device: torch.device) -> int:
    """8 warps for large tiles on a GPU: the (D_k, BV) state, the chunk tiles and the C x C inverse then fit in
    255 registers per thread with little spilling (checked with ptxas for sm_90); 4 otherwise."""
    return 8 if device.type == "cuda" and block_k * block_v >= 64 * 64 else 4


def varlen_state_dims(dims: Dims, cu_seqlens, q) -> Dims:
    """The dims that states are checked against: ``dims`` itself, or with ``cu_seqlens`` (checked here, fla's
    convention) a copy whose leading state dim is the number of sequences N, set by ``cu_seqlens``."""
    if cu_seqlens is None:
        return dims
    offsets = check_cu_seqlens(cu_seqlens, q)
    state_dims = Dims(**{**dims.sizes, "B": len(offsets) - 1})
    state_dims.owner.update(dims.owner, B="cu_seqlens (N sequences)")
    return state_dims


def varlen_grid_rows(B: int, cu_seqlens) -> int:
    """Programs per head on the grid's first axis: one per batch element, or one per sequence."""
    return B if cu_seqlens is None else cu_seqlens.numel() - 1


def kernel_input(x: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A contiguous tensor the kernel may read: strided views are copied, never misread; under the interpreter
    low-precision floats become fp32 (the interpreter mishandles bf16)."""
    if x is None:
        return None
    if device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    return x.contiguous()


class KernelFunction(torch.autograd.Function):
    """Forward through a Triton kernel; backward by recomputation through the reference chunk op.

    ``KernelFunction.apply(launch, reference, options, *inputs)`` returns the tuple of tensors
    ``launch(*inputs, **options)`` (the output, then the parts of the final state). The backward pass re-runs
    ``reference(*inputs, **options)``, which returns the same tuple computed in PyTorch, under autograd and hands
    back its gradients: they are the reference's gradients exactly, at the reference's cost in time and memory.
    ``inputs`` are tensors or None.

    Second derivatives (``create_graph=True``, e.g. a gradient penalty) also come from the reference: the
    recomputation then runs on the saved inputs themselves, inside the caller's graph, so its gradients are
    differentiable again.
    """

    @staticmethod
    def forward(ctx, launch: Callable, reference: Callable, options: dict, *inputs):
        ctx.reference, ctx.options = reference, options
        ctx.save_for_backward(*inputs)
        return launch(*inputs, **options)

    @staticmethod
    def backward(ctx, *grad_outputs):
        needs = ctx.needs_input_grad[3:]
        # Grad mode is on in a backward pass exactly when the caller asked for create_graph=True.
        create_graph = torch.is_grad_enabled()
        with torch.enable_grad():
            if create_graph:  # recompute inside the caller's graph, so that these gradients can be differentiated
                leaves = list(ctx.saved_tensors)
            else:  # a private graph, freed when this pass returns
                leaves = [
                    x.detach().requires_grad_(need) if x is not None else None
                    for x, need in zip(ctx.saved_tensors, needs)
                ]
            outputs = ctx.reference(*leaves, **ctx.options)
            pairs = [(y, dy.to(y.dtype)) for y, dy in zip(outputs, grad_outputs) if dy is not None and y.requires_grad]
            wanted = [x for x, need in zip(leaves, needs) if need]
            found = iter(
                torch.autograd.grad(
                    [y for y, _ in pairs], wanted, [dy for _, dy in pairs], allow_unused=True, create_graph=create_graph
                )
            )
        return (None, None, None, *[next(found) if need else None for need in needs])
