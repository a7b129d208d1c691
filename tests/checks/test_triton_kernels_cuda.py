"""On a machine with CUDA, the puzzle checks compile the student's kernel and run it on the GPU, where tf32 products
and wrong strides show for real. Skipped without a GPU (the interpreter tests cover the checks there)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

CODE = """
import sys
sys.path.insert(0, {tests!r})
import triton_puzzle_kernels as K
from ttr_edu.checks import CheckFailed, triton_kernels as checks

assert type(K.causal_chunk).__name__ == "JITFunction", type(K.causal_chunk)
assert checks.check_scale_tile(K.scale_tile)
assert checks.check_causal_chunk(K.causal_chunk)
assert checks.check_running_sum(K.running_sum)
assert checks.check_delta_rule_chunk(K.delta_rule_chunk)
assert checks.check_gated_delta_rule_chunk(K.gated_delta_rule_chunk)
assert checks.check_chunk_dv(K.chunk_dv)
for check, wrong in [(checks.check_causal_chunk, K.causal_chunk_default_precision),
                     (checks.check_delta_rule_chunk, K.Bound(K.delta_rule_chunk, NO_WS=True)),
                     (checks.check_running_sum, K.Bound(K.running_sum, TIME_STRIDE_D=True))]:
    try:
        check(wrong)
    except CheckFailed:
        continue
    raise AssertionError(f"{{check.__name__}} accepted a wrong kernel on the GPU")
print("compiled checks ok")
"""


@pytest.mark.slow
def test_checks_run_compiled_kernels_on_the_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = CODE.format(tests=str(Path(__file__).parent))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "compiled checks ok" in result.stdout
