"""Test-session setup for the whole repository (tests/, chapters/ and solutions/)."""

import importlib.util
import os

import torch

# Triton kernels run on CPU tensors only through the interpreter, which must be chosen before triton is imported.
# Notebook kernels started by nbval inherit this environment.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Triton has wheels for Linux only; elsewhere the kernel chapter is skipped rather than failed.
collect_ignore_glob = [] if importlib.util.find_spec("triton") else ["*/12_triton_kernels.ipynb"]


def pytest_collection_modifyitems(items):
    """Mark every notebook cell (collected by nbval) as ``notebook``, so ``-m "not notebook"`` skips them."""
    import pytest

    for item in items:
        if str(item.path).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)


def _retry_kernel_start():
    """Let nbval retry a kernel that dies while starting (twice at most), and nothing else.

    Once in a full run here, every cell of one notebook errored with "Kernel died" at start-up (nbval hides the
    kernel's stderr). The likely cause, not confirmed: with ``pytest -n 2`` two kernels and the book test's Jupyter
    server start at once, and jupyter_client picks its ports by binding and releasing them, so another process can
    take one in between (a known race, e.g. treebeardtech/nbmake#129). A cell that fails, or a kernel that dies
    while running a cell, is not retried.
    """
    try:
        import nbval.kernel
    except ImportError:
        return
    start = nbval.kernel.start_new_kernel

    def start_with_retries(*args, **kwargs):
        for attempt in range(3):
            try:
                return start(*args, **kwargs)  # on failure it has already shut the dead kernel down
            except RuntimeError:
                if attempt == 2:
                    raise

    nbval.kernel.start_new_kernel = start_with_retries


_retry_kernel_start()
