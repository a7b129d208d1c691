"""Compile the package's delta-rule kernel for an H100-class GPU (sm_90) on a CPU and read ptxas's report.

No GPU is needed: Triton's NVIDIA backend ships ptxas, and ``TRITON_DUMP_PTXAS_LOG=1`` makes it print, per kernel,
the registers per thread, the bytes of spilled registers (stores and loads to local memory), the stack frame, and
performance warnings such as "wgmma.mma_async instructions are serialized due to insufficient register resources".

Configuration: the tiles, warps and dot precision the wrappers choose on a GPU for D_k = D_v = 128 (as in
``tests/kernels/test_compile.py``), fp32 inputs, chunk 64, H = 16. Each compilation runs in a subprocess with
``TRITON_INTERPRET`` unset and takes several seconds (about 12 s on an idle core).

``benchmarks/sm90_ptxas_report.py`` writes :data:`SHIPPED` for every precision, with and without the gate; the
Triton chapter prints that table, or recompiles when ``TTR_EDU_COMPILE=1`` is set.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

__all__ = ["FIELDS", "SHIPPED", "PRECISIONS", "compile_report", "read_shipped"]

SHIPPED = Path(__file__).resolve().parent / "sm90_ptxas_report.csv"
PRECISIONS = ("ieee", "tf32x3", "tf32")
FIELDS = [
    "precision",
    "use_g",
    "registers",
    "spill_stores_bytes",
    "spill_loads_bytes",
    "stack_bytes",
    "wgmma_serialized",
]

COMPILE = textwrap.dedent(
    """
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from ttr_edu.kernels import _dispatch, _triton_kernels as K

    cuda = torch.device("cuda")  # a description only: nothing is allocated
    kernel = K.delta_rule_fwd_kernel
    BK, BV = _dispatch.tile_sizes(128, 128, cuda)
    names = kernel.arg_names
    signature = {{n: "*fp32" for n in names if n in ("q", "k", "v", "beta", "g", "o", "s0", "s_final")}}
    signature.update({{"scale": "fp32", "T": "i32", "cu_seqlens": "*i64"}})  # cu_seqlens: if the kernel has it
    constants = dict(H=16, D_K=128, D_V=128, BT=64, BK=BK, BV=BV, HAS_S0=True, STORE_FINAL=True,
                     PRECISION="{precision}", USE_G={use_g}, IS_VARLEN=False)
    constants = {{n: c for n, c in constants.items() if n in names}}  # only the constexprs this kernel declares
    signature.update({{n: "constexpr" for n in constants}})
    signature = {{n: signature[n] for n in names}}
    source = ASTSource(kernel, signature, constexprs={{(names.index(n),): v for n, v in constants.items()}})
    triton.compile(source, target=GPUTarget("cuda", 90, 32), options={{"num_warps": _dispatch.warps_for(BK, BV, cuda)}})
    """
)


def compile_report(precision: str, use_g: bool) -> dict:
    """Compile one configuration in a subprocess and parse ptxas's report into a row of :data:`FIELDS`.

    Args:
        precision: the ``tl.dot`` input precision, one of :data:`PRECISIONS`.
        use_g: compile the gated variant (``USE_G=True``).

    Raises:
        ValueError: an unknown ``precision``.
        RuntimeError: the compilation failed, or ptxas printed no report.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as cache:
        env.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_CACHE_DIR=cache)
        result = subprocess.run(
            [sys.executable, "-c", COMPILE.format(precision=precision, use_g=use_g)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    log = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(f"compiling for sm_90 failed ({precision}, USE_G={use_g}):\n{log[-3000:]}")

    def number(pattern: str) -> int:
        found = re.findall(pattern, log)
        if not found:
            raise RuntimeError(f"no {pattern!r} in ptxas's report:\n{log[-2000:]}")
        return int(found[-1])

    return {
        "precision": precision,
        "use_g": use_g,
        "registers": number(r"Used (\d+) registers"),
        "spill_stores_bytes": number(r"(\d+) bytes spill stores"),
        "spill_loads_bytes": number(r"(\d+) bytes spill loads"),
        "stack_bytes": number(r"(\d+) bytes stack frame"),
        "wgmma_serialized": "wgmma.mma_async instructions are serialized" in log,
    }


def read_shipped() -> list[dict]:
    """The rows of :data:`SHIPPED`, with numbers as ints and flags as bools."""
    with open(SHIPPED, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for key in FIELDS[2:6]:
            row[key] = int(row[key])
        row["use_g"] = row["use_g"] == "True"
        row["wgmma_serialized"] = row["wgmma_serialized"] == "True"
    return rows
