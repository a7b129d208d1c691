"""ptxas_report compiles a kernel from its source for sm_90 on a CPU and parses the report (no GPU needed)."""

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.backends.nvidia", reason="needs Triton's CUDA backend (ptxas ships with it)")

from ttr_edu.kernels import ptxas_report

PUZZLE_SIGNATURE = {
    **{name: "*fp32" for name in ("q_ptr", "k_ptr", "v_ptr", "beta_ptr", "o_ptr", "s0_ptr", "s_ptr")},
    **{name: "i32" for name in ("T", "H", "D_k", "D_v")},
}


@pytest.mark.slow
def test_a_kernel_defined_elsewhere_compiles_from_its_source_and_reports():
    from tests.checks.triton_puzzle_kernels import delta_rule_chunk  # the puzzle 12.6 reference, with flag defaults

    report = ptxas_report.compile_kernel_report(
        delta_rule_chunk, PUZZLE_SIGNATURE, {"BLOCK_T": 16, "BLOCK_K": 64, "BLOCK_V": 16}, num_warps=4
    )
    assert 0 < report["registers"] <= 255
    assert report["spill_stores_bytes"] >= 0 and report["stack_bytes"] >= 0


def test_a_kernel_without_source_is_refused():
    with pytest.raises(TypeError, match="source can be read"):
        ptxas_report.compile_kernel_report(object(), {}, {})


@pytest.mark.slow
def test_a_kernel_that_does_not_compile_says_so():
    import triton
    import triton.language as tl

    @triton.jit
    def stub(x_ptr, BLOCK: tl.constexpr):
        raise NotImplementedError()

    with pytest.raises(RuntimeError, match="compiling stub for sm_90 failed"):
        ptxas_report.compile_kernel_report(stub, {"x_ptr": "*fp32"}, {"BLOCK": 16})
