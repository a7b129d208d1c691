"""Test-session setup shared by every test file."""

import os

import torch

# Triton kernels run on CPU tensors only through the interpreter, which must be chosen before triton is imported.
# Notebook kernels started by nbval inherit this environment.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
