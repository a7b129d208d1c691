"""benchmarks/kernels_gpu.py runs its plan without a GPU (--dry-run) and refuses a real run without CUDA."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kernels_gpu.py"


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
