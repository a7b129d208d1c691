"""Compile the package's delta-rule kernel for an H100-class GPU (sm_90) on a CPU and read ptxas's report.

No GPU is needed: Triton's NVIDIA backend ships ptxas, and ``TRITON_DUMP_PTXAS_LOG=1`` makes it print, per kernel,
the registers per thread, the bytes of spilled registers (stores and loads to local memory), the stack frame, and
performance warnings such as "wgmma.mma_async instructions are serialized due to insufficient register resources".

How to read the numbers (NVIDIA's ptxas documentation, "-v"): *registers* and the *stack frame* are per thread; the
*spill stores* and *spill loads* are the bytes moved by the spill instructions in the compiled code, counted once per
instruction (a static count: an instruction inside a loop runs once per iteration, and a thread does not hold that
many bytes). A thread's local memory is its stack frame.

Configuration: the tiles, warps and dot precision the wrappers choose on a GPU for D_k = D_v = 128 (as in
``tests/kernels/test_compile.py``), fp32 inputs, chunk 64, H = 16. Each compilation runs in a subprocess with
``TRITON_INTERPRET`` unset and takes several seconds (about 12 s on an idle core).

Beside ptxas's report, each compilation counts the tensor-core instructions in the PTX: ``wgmma.mma_async`` (Hopper's
warpgroup MMA, whose B operand comes from shared memory) and ``mma.sync`` (the warp-level MMA of Ampere, "MMAv2",
operands in registers). Which one Triton emits for a ``tl.dot`` depends on the tile: a product too small for a
warpgroup's instruction stays on ``mma.sync``.

``benchmarks/sm90_ptxas_report.py`` writes :data:`SHIPPED` for every precision, with and without the gate, and
:data:`SHIPPED_TILES`, the tf32 variant at the puzzles' tiles and at the GPU configuration; the Triton chapter prints
both, or recompiles when ``TTR_EDU_COMPILE=1`` is set.
"""

from __future__ import annotations

import csv
import inspect
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

__all__ = [
    "FIELDS",
    "TILE_FIELDS",
    "SHIPPED",
    "SHIPPED_TILES",
    "TILE_CONFIGURATIONS",
    "PRECISIONS",
    "compile_report",
    "compile_kernel_report",
    "read_shipped",
    "read_shipped_tiles",
]

SHIPPED = Path(__file__).resolve().parent / "sm90_ptxas_report.csv"
SHIPPED_TILES = Path(__file__).resolve().parent / "sm90_mma_by_tile.csv"
PRECISIONS = ("ieee", "tf32x3", "tf32")
FIELDS = [
    "precision",
    "use_g",
    "registers",
    "spill_stores_bytes",
    "spill_loads_bytes",
    "stack_bytes",
    "wgmma_serialized",
    "wgmma_instructions",
    "mma_sync_instructions",
]
#: The columns of :data:`SHIPPED_TILES`: one tf32 compilation of the kernel per tile configuration.
TILE_FIELDS = ["tiles", "bt", "bk", "bv", "num_warps", "wgmma_instructions", "mma_sync_instructions", "registers"]
#: name: (BT, BK, BV, warps). The puzzles' tiles (chapter 12, section 7, D_k = 64) and the wrappers' GPU choice at
#: D_k = D_v = 128.
TILE_CONFIGURATIONS = {"puzzle": (16, 64, 16, 4), "gpu": (64, 128, 64, 8)}

#: Printed after a compilation: the tensor-core instructions of its PTX.
_COUNT_PTX = """
import re as _re
_ptx = compiled.asm["ptx"]
print("PTX_MMA", len(_re.findall(r"\\bwgmma\\.mma_async", _ptx)), len(_re.findall(r"\\bmma\\.sync", _ptx)))
"""

COMPILE = textwrap.dedent(
    """
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from ttr_edu.kernels import _dispatch, _triton_kernels as K

    cuda = torch.device("cuda")  # a description only: nothing is allocated
    kernel = K.delta_rule_fwd_kernel
    BK, BV = {tiles}
    names = kernel.arg_names
    signature = {{n: "*fp32" for n in names if n in ("q", "k", "v", "beta", "g", "o", "s0", "s_final")}}
    signature.update({{"scale": "fp32", "T": "i32", "cu_seqlens": "*i64"}})  # cu_seqlens: if the kernel has it
    constants = dict(H=16, D_K={d}, D_V={d}, BT={bt}, BK=BK, BV=BV, HAS_S0=True, STORE_FINAL=True,
                     PRECISION="{precision}", USE_G={use_g}, IS_VARLEN=False)
    constants = {{n: c for n, c in constants.items() if n in names}}  # only the constexprs this kernel declares
    signature.update({{n: "constexpr" for n in constants}})
    signature = {{n: signature[n] for n in names}}
    source = ASTSource(kernel, signature, constexprs={{(names.index(n),): v for n, v in constants.items()}})
    warps = {num_warps} or _dispatch.warps_for(BK, BV, cuda)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={{"num_warps": warps}})
    """
)

#: Compile one ``@triton.jit`` function from a file (its source): the student's kernel of a notebook.
COMPILE_SOURCE = textwrap.dedent(
    """
    import importlib.util, inspect, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location("kernel_source", {path!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = getattr(module, {name!r})
    names = kernel.arg_names
    signature, constants = {signature!r}, {constants!r}
    defaults = {{n: p.default for n, p in inspect.signature(kernel.fn).parameters.items() if p.default is not p.empty}}
    constants = {{**{{n: v for n, v in defaults.items() if n not in signature}}, **constants}}
    signature = {{n: ("constexpr" if n in constants else signature[n]) for n in names}}
    source = ASTSource(kernel, signature, constexprs={{(names.index(n),): v for n, v in constants.items()}})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={{"num_warps": {num_warps}}})
    """
)


def compile_report(
    precision: str,
    use_g: bool,
    *,
    d: int = 128,
    bt: int = 64,
    tiles: tuple[int, int] | None = None,
    num_warps: int | None = None,
) -> dict:
    """Compile one configuration of the package's delta-rule kernel in a subprocess and parse ptxas's report.

    Args:
        precision: the ``tl.dot`` input precision, one of :data:`PRECISIONS`.
        use_g: compile the gated variant (``USE_G=True``).
        d: ``D_k = D_v``. bt: the chunk size ``BT``.
        tiles: ``(BK, BV)``; default what the wrappers choose on a GPU for ``d``.
        num_warps: default what the wrappers choose for the tiles.

    Returns:
        A row of :data:`FIELDS`.

    Raises:
        ValueError: an unknown ``precision``.
        RuntimeError: the compilation failed, or ptxas printed no report.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    code = COMPILE.format(
        precision=precision,
        use_g=use_g,
        d=int(d),
        bt=int(bt),
        tiles=f"_dispatch.tile_sizes({int(d)}, {int(d)}, cuda)" if tiles is None else repr(tuple(tiles)),
        num_warps=repr(num_warps),
    )
    log = _run(code, f"{precision}, USE_G={use_g}")
    return {"precision": precision, "use_g": use_g, **_parse(log)}


def compile_kernel_report(kernel, signature: dict[str, str], constants: dict, num_warps: int = 4) -> dict:
    """Compile any ``@triton.jit`` kernel for sm_90 from its Python source, in a subprocess, and parse ptxas's report.

    This is how a notebook compiles a kernel it defined in the interpreter: the source of ``kernel.fn`` is written to
    a file after ``import triton`` and ``import triton.language as tl``, and compiled with ``TRITON_INTERPRET`` unset.
    The kernel may use only ``triton`` and ``tl``.

    Args:
        kernel: the ``@triton.jit`` function (interpreted or compiled).
        signature: a type for every runtime argument, e.g. ``{"q_ptr": "*fp32", "T": "i32"}``.
        constants: a value for every ``tl.constexpr`` argument.
        num_warps: warps per program.

    Returns:
        ``registers``, ``spill_stores_bytes``, ``spill_loads_bytes``, ``stack_bytes``, ``wgmma_serialized``.

    Raises:
        TypeError: ``kernel`` has no Python source. RuntimeError: the compilation failed or ptxas printed no report.
    """
    fn = getattr(kernel, "fn", None)
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as error:
        raise TypeError(f"kernel: expected a @triton.jit function whose source can be read, got {kernel!r}") from error
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel_source.py"
        path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
        code = COMPILE_SOURCE.format(
            path=str(path), name=fn.__name__, signature=signature, constants=constants, num_warps=int(num_warps)
        )
        return _parse(_run(code, fn.__name__))


def _run(code: str, what: str) -> str:
    """Run ``code`` in a fresh interpreter without ``TRITON_INTERPRET``, asking ptxas for its report; return the log."""
    code += _COUNT_PTX
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as cache:
        env.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_CACHE_DIR=cache, TRITON_DEFAULT_FP_FUSION="1")
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(f"compiling {what} for sm_90 failed:\n{log[-3000:]}")
    return log


def _parse(log: str) -> dict:
    def number(pattern: str) -> int:
        found = re.findall(pattern, log)
        if not found:
            raise RuntimeError(f"no {pattern!r} in ptxas's report:\n{log[-2000:]}")
        return int(found[-1])

    return {
        "registers": number(r"Used (\d+) registers"),
        "spill_stores_bytes": number(r"(\d+) bytes spill stores"),
        "spill_loads_bytes": number(r"(\d+) bytes spill loads"),
        "stack_bytes": number(r"(\d+) bytes stack frame"),
        "wgmma_serialized": "wgmma.mma_async instructions are serialized" in log,
        "wgmma_instructions": number(r"PTX_MMA (\d+) \d+"),
        "mma_sync_instructions": number(r"PTX_MMA \d+ (\d+)"),
    }


def read_shipped() -> list[dict]:
    """The rows of :data:`SHIPPED`, with numbers as ints and flags as bools."""
    with open(SHIPPED, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for key in (*FIELDS[2:6], *FIELDS[7:]):
            row[key] = int(row[key])
        row["use_g"] = row["use_g"] == "True"
        row["wgmma_serialized"] = row["wgmma_serialized"] == "True"
    return rows


def read_shipped_tiles() -> dict[str, dict]:
    """The rows of :data:`SHIPPED_TILES` by configuration name (:data:`TILE_CONFIGURATIONS`), numbers as ints."""
    with open(SHIPPED_TILES, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {row["tiles"]: {key: row[key] if key == "tiles" else int(row[key]) for key in TILE_FIELDS} for row in rows}
