"""The kernels compile for a real GPU target (sm_90), with no GPU present.

The interpreter runs Python semantics and accepts code the compiler rejects, so this test compiles each kernel
with the tiles, dot precision and warps the wrappers choose for D_k = D_v = 128 on a GPU, and reads ptxas's
report: it also bounds register spilling, which the docstring of ``_dispatch.warps_for`` promises is small.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas ships with it)")

COMPILE = textwrap.dedent(
    """
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from ttr_edu.kernels import _dispatch, _triton_kernels as K

    cuda = torch.device("cuda")
    kernel, dtype, use_g, varlen = K.{kernel}, torch.{dtype}, {use_g}, {varlen}
    BK, BV = _dispatch.tile_sizes(128, 128, cuda)
    pointer = "*" + {{torch.bfloat16: "bf16", torch.float32: "fp32"}}[dtype]
    names = kernel.arg_names
    signature = {{n: pointer for n in names if n in ("q", "k", "v", "beta", "g", "o")}}
    signature.update({{"s0": "*fp32", "s_final": "*fp32", "cu_seqlens": "*i64", "scale": "fp32", "T": "i32"}})
    constants = dict(H=16, D_K=128, D_V=128, BT=64, BK=BK, BV=BV, HAS_S0=True, STORE_FINAL=True,
                     PRECISION=_dispatch.dot_precision(dtype, cuda), IS_VARLEN=varlen)
    if "USE_G" in names:
        constants["USE_G"] = use_g
    signature.update({{n: "constexpr" for n in constants}})
    signature = {{n: signature[n] for n in names}}
    source = ASTSource(kernel, signature, constexprs={{(names.index(n),): v for n, v in constants.items()}})
    triton.compile(source, target=GPUTarget("cuda", 90, 32),
                   options={{"num_warps": _dispatch.warps_for(BK, BV, cuda)}})
    """
)

CASES = [  # kernel, dtype, gated, cu_seqlens
    ("linear_attention_fwd_kernel", "float32", False, False),
    ("delta_rule_fwd_kernel", "bfloat16", False, False),
    ("delta_rule_fwd_kernel", "float32", True, False),
    ("linear_attention_fwd_kernel", "bfloat16", False, True),
    ("delta_rule_fwd_kernel", "float32", True, True),
]


@pytest.mark.slow
@pytest.mark.parametrize("kernel, dtype, use_g, varlen", CASES)
def test_kernel_compiles_for_sm90_with_little_spilling(kernel, dtype, use_g, varlen, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_CACHE_DIR=str(tmp_path))
    code = COMPILE.format(kernel=kernel, dtype=dtype, use_g=use_g, varlen=varlen)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", result.stdout)]
    assert spills, f"no ptxas report in the output:\n{result.stdout[-2000:]}"
    assert max(spills) <= 8192, f"{kernel} ({dtype}) spills {max(spills)} bytes per thread"
