"""Measure what a PyTorch computation costs: best-of-n time, peak tensor memory, bytes of tensors created, the
operations it runs.

The memory counters watch every PyTorch operation through a ``TorchDispatchMode``, so they work on any device (CPU
included, where there is no allocator statistic) and count exactly the tensors the computation creates:

* a **new storage** is the storage of an operation's output that no input of that operation shares: views
  (``transpose``, ``reshape`` of a contiguous tensor) and in-place or ``out=`` results create nothing;
* the tensors that exist before the call (the inputs) are not counted;
* what a Triton kernel does with registers or shared memory is invisible here (it is not a PyTorch operation),
  but its output buffers, allocated with ``torch.empty``, are counted.

Used by the chapters linear_attention_is_fwp (FLOPs, memory and time against ``T``), chunkwise_algorithms (memory
against ``T`` and the chunk size, operations against the chunk size) and triton_kernels (the reference's memory
traffic)::

    from ttr_edu import profiling
    profiling.peak_memory(lambda: ops.delta_rule_chunk(q, k, v, beta))     # bytes
    profiling.bytes_created(lambda: ops.delta_rule_chunk(q, k, v, beta))   # bytes
    profiling.operation_count(lambda: ops.delta_rule_chunk(q, k, v, beta)) # PyTorch operations
    profiling.best_seconds(lambda: ops.delta_rule_chunk(q, k, v, beta))    # seconds
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ttr_edu._internal.validation import check_positive_int

__all__ = [
    "PeakMemory",
    "BytesCreated",
    "peak_memory",
    "bytes_created",
    "matmul_flops",
    "operation_count",
    "work_count",
    "best_seconds",
]


def _storages(tree) -> dict[int, int]:
    """``{data_ptr: nbytes}`` of the storages of the (non-empty) tensors found in a nested structure."""
    found = {}
    for x in tree_leaves(tree):
        if isinstance(x, torch.Tensor) and x.device.type != "meta":
            storage = x.untyped_storage()
            if storage.nbytes() > 0:
                found[storage.data_ptr()] = storage.nbytes()
    return found


def _new_storages(inputs, outputs) -> list[torch.UntypedStorage]:
    """The storages of ``outputs`` that none of ``inputs`` shares (each once)."""
    shared = _storages(inputs)
    new = {}
    for x in tree_leaves(outputs):
        if isinstance(x, torch.Tensor) and x.device.type != "meta":
            storage = x.untyped_storage()
            if storage.nbytes() > 0 and storage.data_ptr() not in shared:
                new[storage.data_ptr()] = storage
    return list(new.values())


class BytesCreated(TorchDispatchMode):
    """Context manager: ``total`` is the bytes of all storages created by PyTorch operations inside the block.

    A lower bound on the memory traffic of the block: every created tensor is written at least once. Views and
    in-place results create nothing and are not counted (see the module docstring).

    Example::

        with BytesCreated() as created:
            ops.delta_rule_chunk(q, k, v, beta)
        created.total  # int, bytes
    """

    def __enter__(self):
        self.total = 0
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.total += sum(storage.nbytes() for storage in _new_storages((args, kwargs), out))
        return out


class PeakMemory(TorchDispatchMode):
    """Context manager: ``peak`` is the largest number of bytes held at one time by storages created inside the block.

    A storage counts from the operation that creates it until Python frees it (a ``weakref.finalize`` on the
    storage), so temporaries freed early lower ``live`` again. ``live`` is what is still held when read.

    Example::

        with PeakMemory() as tracker:
            ops.delta_rule_parallel(q, k, v, beta)
        tracker.peak  # int, bytes
    """

    def __enter__(self):
        self.live, self.peak, self._held = 0, 0, set()
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        for storage in _new_storages((args, kwargs), out):
            pointer, nbytes = storage.data_ptr(), storage.nbytes()
            if pointer in self._held:  # already counted (an op that returns a storage created earlier)
                continue
            self._held.add(pointer)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, pointer, nbytes)
        return out

    def _free(self, pointer: int, nbytes: int) -> None:
        if pointer in self._held:
            self._held.discard(pointer)
            self.live -= nbytes


def _check_callable(fn) -> None:
    if not callable(fn):
        raise TypeError(f"fn: expected a callable taking no arguments (e.g. a lambda), got {type(fn).__name__}")


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes held by the tensors that ``fn()`` creates (its result included while it is alive).

    Args:
        fn: a callable with no arguments, e.g. ``lambda: ops.delta_rule_chunk(q, k, v, beta)``.

    Returns:
        int, bytes; 0 when ``fn`` creates no tensor.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    _check_callable(fn)
    with PeakMemory() as tracker:
        fn()
    return tracker.peak


def bytes_created(fn: Callable[[], object]) -> int:
    """Total bytes of all tensors that ``fn()`` creates, each counted once (views and in-place results excluded).

    Args:
        fn: a callable with no arguments.

    Returns:
        int, bytes.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    _check_callable(fn)
    with BytesCreated() as created:
        fn()
    return created.total


def matmul_flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of the matrix products that ``fn()`` runs, counted by torch's ``FlopCounterMode``.

    Deterministic, unlike a timing: it depends only on the shapes. It counts matrix products (``mm``, ``bmm``,
    ``einsum`` contractions, ``@``), 2 operations per multiply-add; elementwise work (an outer product written as a
    broadcast, a mask, a sum) is not counted, which is fine for comparing how forms of one layer scale.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    from torch.utils.flop_counter import FlopCounterMode

    _check_callable(fn)
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


class _CountOperations(TorchDispatchMode):
    """Context manager: ``count`` is the number of PyTorch operations run inside the block."""

    def __enter__(self):
        self.count = 0
        return super().__enter__()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled: no need to import torch._dynamo (2–3 s) on the first operation

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def operation_count(fn: Callable[[], object]) -> int:
    """How many PyTorch operations ``fn()`` runs: every ATen operation dispatched once, views, copies and in-place
    updates included (one CUDA kernel launch or more each on a GPU).

    Deterministic, unlike a timing: it depends only on the shapes and the code path. Each operation pays a fixed cost
    to dispatch (and launch) whatever its size, so the count measures the per-step overhead of a loop of small steps,
    as :func:`matmul_flops` measures the arithmetic: the chunked delta rule runs a few operations per chunk, so its
    count falls as the chunk size grows.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    _check_callable(fn)
    with _CountOperations() as counter:
        fn()
    return counter.count


def _elements(value) -> int:
    """The number of elements of the tensors in ``value`` (a tensor, a list of them, or anything else: 0)."""
    return sum(x.numel() for x in tree_leaves(value) if isinstance(x, torch.Tensor))


def _op_work(func, args: tuple, kwargs: dict, out) -> int:
    """The work of one ATen operation, as :func:`work_count` counts it (read from the operation's schema, so every
    operation is counted, none by name):

    * a view (its result aliases an input and writes nothing: ``slice``, ``transpose``, ``select``, ``expand``) reads
      and writes no element: 0;
    * otherwise the elements of its tensor inputs (read) plus those of its outputs (written), an output that is an
      input written in place (``add_``, ``copy_`` into a slice, ``out=``) counted once, as read; an operation with an
      ``index``/``indices`` argument (``index``, ``gather``, ``index_put_``, ``scatter_``) reads and writes only the
      indexed part of ``self``, so ``self`` is left out and its indices, values and result count;
    * plus the multiply-adds of a matrix product or convolution (``mm``, ``bmm``, ``addmm``, ``baddbmm``; ``@``,
      ``matmul`` and ``einsum`` reach these), from torch's ``FlopCounterMode`` formulas (two FLOPs each): a product
      reads ``m k + k n`` and writes ``m n`` elements but does ``m k n`` multiply-adds.
    """
    from torch.utils.flop_counter import flop_registry

    schema = func._schema
    aliases = [r.alias_info for r in schema.returns]
    if any(a is not None and not a.is_write for a in aliases):
        return 0
    names = [a.name for a in schema.arguments]
    indexed = "index" in names or "indices" in names
    work = 0
    for i, value in enumerate(args):
        if not (indexed and i < len(names) and names[i] == "self"):
            work += _elements(value)
    for name, value in kwargs.items():
        if not (indexed and name == "self"):
            work += _elements(value)
    if not any(a is not None for a in aliases):
        work += _elements(out)
    formula = flop_registry.get(func._overloadpacket)
    if formula is not None:
        try:
            work += int(formula(*args, **kwargs, out_val=out)) // 2
        except Exception:  # a formula that does not take these arguments: the elements above still count
            pass
    return work


class _CountWork(_CountOperations):
    """Context manager: ``count`` as :class:`_CountOperations`, and ``work``, the elements the PyTorch operations run
    inside the block read and write plus the multiply-adds of their matrix products (:func:`work_count`); and
    ``cat_work``, the part of it done by concatenations (``torch.cat``, and ``torch.stack``, which calls it), so that a
    check can say when copying a growing output again at each step is what makes the work grow."""

    def __enter__(self):
        self.work = 0
        self.cat_work = 0
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.count += 1
        out = func(*args, **kwargs)
        work = _op_work(func, args, kwargs, out)
        self.work += work
        if func._overloadpacket is torch.ops.aten.cat:
            self.cat_work += work
        return out


def work_count(fn: Callable[[], object]) -> int:
    """The work of the PyTorch operations ``fn()`` runs: for each operation the elements it reads and writes (a view
    none), plus the multiply-adds of matrix products (``@``, ``einsum``, ``bmm``: ``m k n`` for ``(m, k) @ (k, n)``).

    Deterministic, unlike a timing: it depends only on the shapes and the code path, not on the machine or its load.
    Every operation counts (elementwise, reductions, ``cumsum``, copies, products), read from its schema rather than
    from a list of names, so the count grows like the cost: linearly in ``T`` for a recurrence that keeps a state,
    like ``T²`` for a ``T × T`` matrix or a loop that re-reads the whole prefix at each step. Work done outside
    PyTorch (numpy, Python numbers) is not seen.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    _check_callable(fn)
    with _CountWork() as counter:
        fn()
    return counter.work


#: The most calls :func:`best_seconds` makes.
MAX_REPEATS = 1000


def best_seconds(fn: Callable[[], object], repeats: int = 5) -> float:
    """The shortest wall-clock time of ``repeats`` calls of ``fn()``, in seconds.

    The minimum, as :mod:`timeit` advises: other programs can only slow a run down, never speed it up. On a GPU,
    synchronise inside ``fn`` (``torch.cuda.synchronize()``), or the time is only the launch.

    Raises:
        TypeError: ``fn`` is not callable, or ``repeats`` is not an int.
        ValueError: ``repeats`` outside ``[1, 1000]`` (the best of a few calls is the measurement; more only waits).
    """
    _check_callable(fn)
    check_positive_int("repeats", repeats, maximum=MAX_REPEATS, why="the best of a few calls is the measurement")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
