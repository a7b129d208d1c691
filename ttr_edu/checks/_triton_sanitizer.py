"""Make Triton's interpreter behave like a GPU where the difference hides bugs, while a puzzle check runs.

Triton's interpreter (``TRITON_INTERPRET=1``, triton 3.9) executes a kernel's tile operations with NumPy. Four of its
behaviours differ from a compiled kernel on a GPU, and each lets a kernel pass on a CPU that is wrong on a GPU:

* ``tl.dot`` ignores ``input_precision``: on a GPU an fp32 product without ``input_precision="ieee"`` (or
  ``"tf32x3"``) runs in **tf32** (inputs cut to 10 mantissa bits). Here, such a product has its inputs rounded to
  tf32 (to nearest even); a GPU may truncate them instead, which Triton 3.9's ``tl.dot`` docstring warns of
  (``sources.yaml``, ``12-triton-tf32-truncation``): an error at most twice as large, of the same order;
* a masked ``tl.load`` without ``other=`` returns zeros in the masked-off lanes; on a GPU those lanes hold whatever
  the registers held. Here they are **NaN**, so a masked-off lane that reaches a product or a sum shows up;
* a load or store at an address outside every tensor reads or writes this process's memory, and a wild stride can
  kill the Python process (the student's Jupyter kernel). Here every unmasked address is checked against the tensors
  the check handed to the kernel **before** the access, and an address outside all of them raises
  :class:`KernelMemoryError` naming the nearest tensor.

* ``tl.dot`` accepts tiles of any size (the interpreter's builder states the minimum ``(M, N, K)`` as ``(1, 1, 1)``);
  for a GPU, Triton's front end refuses a product below the backend's minimum when it compiles, e.g. an outer product
  ``tl.dot(k[:, None], v[None, :])`` with ``K = 1`` ("Input shapes should have M >= 1, N >= 1 and K >= 8" for fp32 on
  NVIDIA). Here the builder states the NVIDIA backend's minimum (``min_dot_size`` in
  ``triton/backends/nvidia/compiler.py``, or the same table where that backend is missing), so Triton's own check
  refuses such a product in the interpreter as it does when compiling (:data:`DOT_TOO_SMALL` starts its message).

It also multiplies bfloat16 tiles by their values: the interpreter keeps bfloat16 as its raw 16 bits (NumPy has no
bfloat16) and its ``tl.dot`` multiplied those bit patterns as integers, a result off by 10⁸ that hid the real
bfloat16 error (about 1e-2, as on a GPU) behind a nonsense one. Here each operand's bits become the fp32 value they
stand for, multiplied and accumulated in fp32 as tensor cores do.

It also accepts a mask whose NumPy dtype is not bool (a block mask combined with a scalar comparison, e.g.
``(cols < D) & (row < T)``), which compiles for a GPU but which the interpreter's loader refuses with
"mask has unsupported dtype".

Only the check's launches are affected: :func:`sanitized` patches the interpreter's builder for the duration of a
``with`` block and restores it afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["KernelMemoryError", "sanitized", "round_to_tf32", "gpu_min_dot_size", "DOT_TOO_SMALL"]

#: how Triton's front end (``triton/language/semantic.py``, ``dot``) starts the message of a ``tl.dot`` below the
#: backend's minimum size
DOT_TOO_SMALL = "Input shapes should have"


class KernelMemoryError(RuntimeError):
    """A kernel addressed memory outside every tensor it was given (found before the access was made)."""


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """Round fp32 values to tf32 (10 explicit mantissa bits), to nearest with ties to even; inf and NaN unchanged.

    tf32 keeps fp32's 8-bit exponent and the top 10 of its 23 mantissa bits (NVIDIA Ampere whitepaper, "TF32").
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    dropped = np.uint32(13)  # 23 − 10 mantissa bits go
    odd = (bits >> dropped) & np.uint32(1)  # ties go to the even neighbour
    rounded = (bits + np.uint32(0x0FFF) + odd) & np.uint32(0xFFFFE000)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return np.where(finite, rounded, bits).view(np.float32)


def bf16_bits_to_fp32(bits: np.ndarray) -> np.ndarray:
    """The fp32 values of bfloat16 numbers given by their 16 bits (``uint16``): bfloat16 is fp32's top half."""
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def gpu_min_dot_size() -> Callable[[Any, Any], tuple[int, int, int]]:
    """The smallest ``(M, N, K)`` of a ``tl.dot`` that Triton's NVIDIA backend compiles, as a function of the two
    operand types: the backend's own ``min_dot_size`` where it is installed, else the same table (Triton 3.9.0,
    ``triton/backends/nvidia/compiler.py`` lines 22-37): K ≥ 32 for 8-bit inputs, 4 for 64-bit, 8 for 32-bit and 16
    otherwise; M, N ≥ 1."""
    try:
        from triton.backends.nvidia.compiler import min_dot_size
    except ImportError:  # a Triton without its CUDA backend

        def by_width(lhs_type, rhs_type) -> tuple[int, int, int]:
            bits = lhs_type.scalar.primitive_bitwidth
            return (1, 1, {8: 32, 64: 4, 32: 8}.get(bits, 16))

        return by_width
    return min_dot_size(None)  # the target is not consulted: the bound depends on the inputs' bit width only


def _is_plain_tf32(precision) -> bool:
    # the interpreter passes ir.INPUT_PRECISION.<name>; "TF32x3" (and IEEE) keep near-fp32 accuracy
    return str(precision).rsplit(".", 1)[-1].upper() == "TF32"


class _Ranges:
    """The byte ranges ``[start, end)`` of the tensors a check handed to a kernel, with their names."""

    def __init__(self, buffers: Sequence[tuple[str, int, int]]):
        self.buffers = list(buffers)

    def check(self, addresses: np.ndarray, mask: np.ndarray, itemsize: int, action: str) -> None:
        wanted = np.asarray(addresses, dtype=np.uint64)[mask]
        if wanted.size == 0:
            return
        inside = np.zeros(wanted.shape, dtype=bool)
        hits = []
        for _, start, end in self.buffers:
            here = (wanted >= start) & (wanted + np.uint64(itemsize) <= end)
            hits.append(int(here.sum()))
            inside |= here
        if inside.all():
            return
        bad = int(wanted[~inside][0])
        if max(hits) > 0:  # the pointer most likely derives from the tensor that holds the rest of its block
            name, start, end = self.buffers[int(np.argmax(hits))]
            which = "the tensor that holds the rest of this block"
        else:
            name, start, end = min(self.buffers, key=lambda b: min(abs(bad - b[1]), abs(bad - b[2])))
            which = "the nearest tensor in memory"
        where = (
            f"{(bad - end) // itemsize} element(s) past the end"
            if bad >= end
            else f"{(start - bad) // itemsize} element(s) before the start"
        )
        raise KernelMemoryError(
            f"your kernel tried to {action} {int((~inside).sum())} address(es) outside every tensor it was given; "
            f"the first is {where} of `{name}` ({which}, NaN guard bands included). "
            "The check stopped it before the access (on a GPU "
            "this reads garbage or crashes). Look at the strides and offsets of that pointer, and at its mask."
        )


@contextlib.contextmanager
def sanitized(buffers: Sequence[tuple[str, int, int]]) -> Iterator[None]:
    """Patch the interpreter's loads, stores, ``tl.dot`` and its minimum size while the block runs (see the module
    docstring).

    Args:
        buffers: ``(name, first byte address, one past the last byte address)`` of every tensor the kernel may touch.
    """
    import triton.language as tl  # imported here: the checks module must import without Triton
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    ranges = _Ranges(buffers)
    original_load, original_store, original_dot = (
        builder.create_masked_load,
        builder.create_masked_store,
        builder.create_dot,
    )

    def as_mask(mask, ptrs) -> np.ndarray:
        return np.broadcast_to(np.asarray(mask.data).astype(bool), np.shape(ptrs.data))

    def masked_load(ptrs, mask, other, cache_policy, is_volatile):
        element = ptrs.get_element_ty()
        mask_data = as_mask(mask, ptrs)
        ranges.check(ptrs.data, mask_data, element.primitive_bitwidth // 8, "read")
        if other is None and element.is_floating():  # a GPU leaves these lanes undefined: make that visible
            dtype = interpreter._get_np_dtype(element)
            other = interpreter.TensorHandle(np.full(np.shape(ptrs.data), np.nan, dtype=dtype), element)
        mask = interpreter.TensorHandle(np.ascontiguousarray(mask_data), tl.int1)
        return original_load(ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(ptrs, value, mask, cache_policy):
        element = ptrs.get_element_ty()
        mask_data = as_mask(mask, ptrs)
        ranges.check(ptrs.data, mask_data, element.primitive_bitwidth // 8, "write")
        mask = interpreter.TensorHandle(np.ascontiguousarray(mask_data), tl.int1)
        return original_store(ptrs, value, mask, cache_policy)

    def dot(a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype == tl.bfloat16 and b.dtype == tl.bfloat16:  # their values, not their bits
            a = interpreter.TensorHandle(bf16_bits_to_fp32(a.data), tl.float32)
            b = interpreter.TensorHandle(bf16_bits_to_fp32(b.data), tl.float32)
            return original_dot(a, b, d, "ieee", max_num_imprecise_acc)
        if _is_plain_tf32(input_precision) and a.data.dtype == np.float32 and b.data.dtype == np.float32:
            a = interpreter.TensorHandle(round_to_tf32(a.data), a.dtype)
            b = interpreter.TensorHandle(round_to_tf32(b.data), b.dtype)
        return original_dot(a, b, d, input_precision, max_num_imprecise_acc)

    builder.create_masked_load, builder.create_masked_store, builder.create_dot = masked_load, masked_store, dot
    original_min_dot_size = builder.codegen_fns.get("min_dot_size")
    builder.codegen_fns["min_dot_size"] = gpu_min_dot_size()
    try:
        yield
    finally:  # instance attributes shadowed the class's methods: removing them restores the interpreter
        for name in ("create_masked_load", "create_masked_store", "create_dot"):
            builder.__dict__.pop(name, None)
        if original_min_dot_size is None:
            builder.codegen_fns.pop("min_dot_size", None)
        else:
            builder.codegen_fns["min_dot_size"] = original_min_dot_size
