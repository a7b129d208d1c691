"""Triton kernels with the signatures of the reference ops in :mod:`ttr_edu.ops`.

* :func:`linear_attention_chunk`: chunked causal linear attention (optionally normalised);
* :func:`delta_rule_chunk`: the chunked delta rule in the WY/UT form;
* :func:`gated_delta_rule_chunk`: the chunked gated delta rule.

Each public function wears the input policy of the ops (:func:`ttr_edu._internal.validation.guarded`). Each
forward pass is one Triton kernel; each backward pass recomputes through the reference chunk op.
CUDA tensors run compiled kernels. CPU tensors run them in Triton's interpreter, which must be switched on
before Triton is imported::

    import os
    os.environ["TRITON_INTERPRET"] = "1"   # before anything imports triton
    from ttr_edu import kernels

Triton ships for Linux only; elsewhere importing this module raises ``ImportError`` and the reference ops
compute the same functions.
"""

try:
    import triton  # noqa: F401
except ImportError as error:  # pragma: no cover - Triton is installed on every Linux test machine
    raise ImportError(
        "ttr_edu.kernels needs Triton, which ships for Linux only (pip install triton). "
        "Use the reference ops in ttr_edu.ops instead: they compute the same functions in PyTorch."
    ) from error

from ttr_edu.kernels._dispatch import interpreter_active
from ttr_edu.kernels.delta_rule import delta_rule_chunk, gated_delta_rule_chunk
from ttr_edu.kernels.linear_attention import linear_attention_chunk

__all__ = ["linear_attention_chunk", "delta_rule_chunk", "gated_delta_rule_chunk", "interpreter_active"]
