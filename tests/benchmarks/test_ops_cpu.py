"""benchmarks/ops_cpu.py prints its columns (fla/ours, GFLOP/s, % of the matmul rate, the share of time moving data)
with fla and without, and every speed target with "met" or "NOT met"."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ops_cpu.py"


@pytest.fixture()
def bench():
    spec = importlib.util.spec_from_file_location("ops_cpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_flop_model_by_hand(bench):
    # one chunk of 64 tokens, one head, D = 64: linear attention 4 C² D + 4 C D², delta rule 8 C² D + 6 C D²
    assert bench.chunk_flops("linear_attention", T=64, C=64, D=64, heads=1) == 8 * 64**3
    assert bench.chunk_flops("gated_delta_rule", T=65, C=64, D=64, heads=2) == 2 * 2 * 14 * 64**3


def test_table_has_the_new_columns(bench, capsys):
    bench.main(["--T", "128", "--repeats", "1", "--layers", "gated_linear_attention", "gla"])
    out = capsys.readouterr().out
    assert "fla/ours" in out and "% mm" in out and "one-core matmul" in out and "load average" in out
    assert "copy %" in out and bench.cpu_model() in out
    chunk_rows = [line for line in out.splitlines() if line.split()[1:2] == ["chunk"]]
    assert len(chunk_rows) == 2 and all(line.rstrip()[-1].isdigit() for line in chunk_rows)
    assert all(line.split()[-2].endswith("%") for line in chunk_rows)  # copy %, before the peak memory
    if bench.fla_version() is not None:  # fla is an optional benchmark dependency (the bench extra)
        assert chunk_rows[0].split()[5].endswith("x")  # a measured ratio
        assert "no fla naive chunk" in chunk_rows[1]  # per-key GLA has no naive chunk form in fla
    else:
        assert all("fla not installed" in line for line in chunk_rows)


def test_without_fla_the_column_says_so(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench, "fla_version", lambda: None)
    bench.main(["--T", "64", "--repeats", "1", "--layers", "gated_linear_attention"])
    chunk_row = next(line for line in capsys.readouterr().out.splitlines() if line.split()[1:2] == ["chunk"])
    assert "fla not installed" in chunk_row


def test_copy_share_counts_copies_and_concatenations(bench):
    x = torch.randn(256, 256)
    assert bench.time_shares(lambda: x @ x, calls=3)["copy"] == 0.0
    assert bench.time_shares(lambda: torch.cat([x, x]).t().contiguous(), calls=3)["copy"] > 0.5


def test_product_share_counts_products_and_solves_only(bench):
    x, y = torch.randn(8, 128, 128), torch.randn(8, 128, 128)
    assert bench.time_shares(lambda: torch.bmm(x, y), calls=3)["products"] > 0.9
    acc = torch.zeros(8, 128, 128)
    assert bench.time_shares(lambda: acc.baddbmm_(x, y), calls=3)["products"] > 0.9  # in place, as the loops
    assert bench.time_shares(lambda: torch.baddbmm(x, x, y), calls=3)["products"] > 0.5  # and a copy of x
    solve = lambda: torch.linalg.solve_triangular(x.tril() + 128 * torch.eye(128), y, upper=False)
    assert bench.time_shares(solve, calls=3)["products"] > 0.3
    moved = bench.time_shares(lambda: torch.cat([x, y]).transpose(1, 2).contiguous(), calls=3)
    assert moved["products"] == 0.0 and moved["copy"] > 0.5
    elementwise = bench.time_shares(lambda: (x * y).exp_(), calls=3)
    assert elementwise["products"] == 0.0 and elementwise["product_seconds"] == 0.0
    shares = bench.time_shares(lambda: torch.bmm(x, y), calls=3)
    assert 0 < shares["product_seconds"] < 1  # seconds, not the profiler's microseconds


def test_every_target_is_printed_met_or_not(bench, capsys):
    results, fla_ratios = {}, {}
    for layer in ("delta_rule", "gla"):
        for T in (1024, 4096):
            results[layer, "copy", T] = (0.05 if T == 1024 else 0.2, 0)
            results[layer, "share", T] = (0.5, 0)
    fla_ratios["delta_rule", 1024], fla_ratios["delta_rule", 4096] = 1.3, 1.1
    bench.report_targets(results, fla_ratios, ["delta_rule", "gla"])
    lines = capsys.readouterr().out.splitlines()[1:]
    assert all(line.endswith((": met", ": NOT met", "nothing to compare")) for line in lines), lines
    verdicts = [line.rsplit(": ", 1)[1] for line in lines if "copy_/cat" in line]
    assert verdicts == ["met", "NOT met", "met", "NOT met"]
    assert sum("of the one-core matmul rate" in line for line in lines) == 4  # delta_rule >= 45 %, gla >= 35 %
    assert not any("its products take" in line for line in lines)  # no product share measured, none printed
    results["delta_rule", "products", 1024] = (0.8, 0)
    results["delta_rule", "product_rate", 1024] = (0.7, 0)
    bench.report_targets(results, fla_ratios, ["delta_rule"])
    rate_line = next(line for line in capsys.readouterr().out.splitlines() if "T=1024: 50.0% of the" in line)
    assert "its products take 80% of its profiled time and run at 70% of the matmul rate by themselves" in rate_line
    assert [line.rsplit(": ", 1)[1] for line in lines if "fla/ours" in line] == ["met", "NOT met"]
