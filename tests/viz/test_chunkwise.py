"""The chunkwise and kernel figures show what they claim: every causal entry once, every output element by one
program, masked lanes blank; bad sizes are refused by name."""

import math

import pytest
import torch

from ttr_edu.kernels import ptxas_report
from ttr_edu.viz import chunkwise


@pytest.mark.parametrize("T, C", [(1, 1), (7, 3), (32, 8), (10, 64)])
def test_block_decomposition_covers_each_causal_entry_once(T, C):
    kind = chunkwise.block_decomposition(T, C)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    assert torch.equal(kind > 0, causal)
    # the diagonal blocks hold c(c+1)/2 entries per chunk of length c
    sizes = [min(C, T - s) for s in range(0, T, C)]
    assert int((kind == chunkwise.INTRA).sum()) == sum(c * (c + 1) // 2 for c in sizes)


def test_block_decomposition_figure_has_one_step_per_chunk_size():
    figure = chunkwise.block_decomposition_figure(16, [1, 4, 16])
    assert len(figure.data) == 3 and len(figure.layout.sliders[0].steps) == 3
    assert figure.layout.xaxis.title.text and figure.layout.yaxis.title.text


@pytest.mark.parametrize("B, H, T, D_v, BV", [(1, 1, 3, 5, 4), (2, 3, 4, 40, 16), (1, 2, 2, 64, 64)])
def test_tile_owner_map_gives_each_element_one_program(B, H, T, D_v, BV):
    owner = chunkwise.tile_owner_map(B, H, T, D_v, BV)
    n_v = math.ceil(D_v / BV)
    valid = ~torch.isnan(owner)
    assert int(valid.sum()) == B * T * H * D_v  # masked lanes (d ≥ D_v) are NaN, everything else owned
    assert set(owner[valid].long().unique().tolist()) == set(range(B * H * n_v))


@pytest.mark.parametrize("args", [(0, 4), (4, 0), (4.0, 2)])
def test_bad_sizes_are_refused_by_name(args):
    with pytest.raises((TypeError, ValueError), match="T|chunk_size"):
        chunkwise.block_decomposition(*args)


def test_shipped_ptxas_report_has_every_variant():
    rows = ptxas_report.read_shipped()
    assert {(r["precision"], r["use_g"]) for r in rows} == {(p, g) for p in ptxas_report.PRECISIONS for g in (0, 1)}
    assert all(r["spill_stores_bytes"] >= 0 and r["registers"] > 0 for r in rows)


def test_compile_report_refuses_an_unknown_precision():
    with pytest.raises(ValueError, match="precision"):
        ptxas_report.compile_report("fp64", False)
