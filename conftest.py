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
