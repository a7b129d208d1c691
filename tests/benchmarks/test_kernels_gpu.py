"""benchmarks/kernels_gpu.py runs its plan without a GPU (--dry-run) and refuses a real run without CUDA."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("kernels_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_dry_run_prints_every_case(bench, capsys):
    assert bench.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "18 cases" in out  # 3 layers x 2 dtypes x 3 lengths
    for T in (1024, 4096, 16384):
        assert f" {T} " in out


def test_flop_and_byte_model_by_hand(bench):
    case = bench.Case("linear_attention", "fp32", B=1, T=64, H=1, D=128, chunk_size=64)
    # one chunk: Q Kᵀ and (Q Kᵀ ⊙ M) V are 2·64·64·128 each; Q S and Kᵀ V are 2·64·128·128 each
    assert case.flops() == 2 * (2 * 64 * 64 * 128) + 2 * (2 * 64 * 128 * 128)
    # q, k, v read and o written (4 · 64 · 128 fp32), plus the 128 x 128 fp32 final state
    assert case.bytes() == 4 * 64 * 128 * 4 + 128 * 128 * 4
    two_chunks = bench.Case("delta_rule", "bf16", B=2, T=65, H=3, D=128, chunk_size=64)
    assert two_chunks.flops() == 2 * 2 * 3 * (10 * 64 * 64 * 128 + 6 * 64 * 128 * 128 + 64**3 / 3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_real_run_needs_cuda(bench, capsys):
    assert bench.main(["--T", "1024"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_varlen_lengths_pack_the_same_tokens(bench):
    case = bench.Case("delta_rule", "fp32", B=8, T=1024, H=2, D=64, chunk_size=64, varlen=True)
    lengths = bench.varlen_lengths(case)
    assert len(lengths) == 8 and sum(lengths) == 8 * 1024 and min(lengths) >= 1 and len(set(lengths)) > 1
    cu = bench.cu_seqlens_of(case, "cpu")
    assert cu[0] == 0 and cu[-1] == 8 * 1024 and cu.dtype == torch.int64
    # each sequence pads its own last chunk: at least as many chunks as the padded batch
    assert case.flops() >= bench.Case("delta_rule", "fp32", B=8, T=1024, H=2, D=64, chunk_size=64).flops()


@pytest.mark.parametrize("layer", ["linear_attention", "delta_rule", "gated_delta_rule"])
def test_varlen_case_runs_kernel_and_reference_alike(bench, layer):
    """The varlen path of the benchmark, small and on the CPU under Triton's interpreter (where it is active): the
    inputs, options and the two calls the GPU run times, with the same error it prints."""
    from ttr_edu import kernels

    if not torch.cuda.is_available() and not kernels.interpreter_active():
        pytest.skip("CPU tensors need TRITON_INTERPRET=1 before triton is imported")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    case = bench.Case(layer, "fp32", B=3, T=40, H=2, D=16, chunk_size=16, varlen=True)
    inputs, opts = bench.make_inputs(case, device), bench.options(case, device)
    assert inputs[0].shape == (1, 120, 2, 16) and opts["cu_seqlens"].numel() == 4
    o, _ = bench.ours(layer)(*inputs, **opts)
    o_ref, _ = bench.reference(layer)(*inputs, **opts)
    assert bench.rel_err(o, o_ref) < 1e-4
