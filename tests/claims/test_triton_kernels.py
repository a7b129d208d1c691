"""The Triton chapter's claims are really checked: change one parameter so that a claim turns false, and the run
stops with ``ClaimFailed`` naming it (CONTRIBUTING.md, "Claims")."""

import pytest

pytest.importorskip("triton")

from tests.claims.mutation import run_mutated

CHAPTER = "solutions/12_triton_kernels.ipynb"

MUTATIONS = [
    # the precisions listed the other way round: the order of their spills no longer matches the sentence
    (
        '["spill_loads_bytes"] for p in ptxas_report.PRECISIONS}',
        '["spill_loads_bytes"] for p in reversed(ptxas_report.PRECISIONS)}',
        "as compiled, ieee products spill far more than tf32x3, which spills more than tf32",
    ),
    # fp32 tiles read as 8-bit ones: the minimum K of a tl.dot is then above the puzzles' tiles
    (
        '("fp32", tl.float32)',
        '("fp32", tl.float8e4nv)',
        "the tiles the checks launch (every side 16 or more) meet the minimum for fp32 and 16-bit inputs",
    ),
    # no rounding to tf32: the "tf32" product is then fp32-accurate
    (
        "q_hi, k_hi = to_tf32(q_tile), to_tf32(k_tile)",
        "q_hi, k_hi = q_tile, k_tile",
        "tf32 products are off by about 1e-4 to 1e-3, relative",
    ),
]


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("old, new, claim", MUTATIONS, ids=[m[2][:40] for m in MUTATIONS])
def test_a_broken_claim_fails_the_run_by_name(old, new, claim):
    error = run_mutated(CHAPTER, old, new)
    assert error is not None and "ClaimFailed" in error and claim in error


# The chapter's reading of ptxas's report (section 7): the ieee variant's few registers are ptxas's choice under
# Triton's launch bound, not a limit written in the code. Compiled here, in a subprocess without TRITON_INTERPRET.
PTX_OF_IEEE = """
import json, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ttr_edu.kernels import _dispatch, _triton_kernels as K

cuda = torch.device("cuda")  # a description only
kernel = K.delta_rule_fwd_kernel
BK, BV = _dispatch.tile_sizes(128, 128, cuda)
names = kernel.arg_names
signature = {n: "*fp32" for n in names if n in ("q", "k", "v", "beta", "g", "o", "s0", "s_final")}
signature.update({"scale": "fp32", "T": "i32", "cu_seqlens": "*i64"})
constants = dict(H=16, D_K=128, D_V=128, BT=64, BK=BK, BV=BV, HAS_S0=True, STORE_FINAL=True, PRECISION="ieee",
                 USE_G=False, IS_VARLEN=False)
constants = {n: c for n, c in constants.items() if n in names}
signature.update({n: "constexpr" for n in constants})
signature = {n: signature[n] for n in names}
source = ASTSource(kernel, signature, constexprs={(names.index(n),): v for n, v in constants.items()})
compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": _dispatch.warps_for(BK, BV, cuda)})
open(sys.argv[1], "w").write(compiled.asm["ptx"])
"""


def _ptxas(ptxas: str, ptx_file, arch: str) -> dict:
    import re
    import subprocess

    log = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(ptx_file), "-o", str(ptx_file) + ".o"],
                         capture_output=True, text=True, check=True).stderr  # fmt: skip
    number = lambda pattern: int(re.search(pattern, log).group(1))
    return {"registers": number(r"Used (\d+) registers"),
            "spilled": number(r"(\d+) bytes spill stores") + number(r"(\d+) bytes spill loads")}  # fmt: skip


@pytest.mark.slow
def test_the_ieee_variant_has_few_registers_by_ptxas_choice_not_by_a_limit_in_its_code(tmp_path):
    import os
    import subprocess
    import sys

    from ttr_edu.kernels import ptxas_report

    knobs = pytest.importorskip("triton.knobs")
    ptx_file = tmp_path / "ieee.ptx"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        subprocess.run([sys.executable, "-c", PTX_OF_IEEE, str(ptx_file)], env=env, check=True, capture_output=True)
        ptxas = knobs.nvidia.ptxas_blackwell.path
    except (subprocess.CalledProcessError, AttributeError, RuntimeError) as error:
        pytest.skip(f"no CUDA backend to compile for sm_90 here: {error}")
    ptx = ptx_file.read_text()
    arch = "sm_90a"
    assert ".maxnreg" not in ptx and ".reqntid" in ptx  # the only register bound is the launch bound
    as_compiled = _ptxas(ptxas, ptx_file, arch)
    free_file = tmp_path / "ieee_without_reqntid.ptx"
    free_file.write_text("\n".join(line for line in ptx.splitlines() if ".reqntid" not in line))
    without_bound = _ptxas(ptxas, free_file, arch)
    shipped = {(r["precision"], r["use_g"]): r for r in ptxas_report.read_shipped()}
    tf32x3 = shipped["tf32x3", False]["spill_stores_bytes"] + shipped["tf32x3", False]["spill_loads_bytes"]
    # as shipped: few registers; without the launch bound ptxas takes them all and spills less, still above tf32x3
    assert as_compiled["registers"] == shipped["ieee", False]["registers"] < 255 / 2
    assert without_bound["registers"] > as_compiled["registers"]
    assert tf32x3 < without_bound["spilled"] < as_compiled["spilled"]
