"""The Triton chapter's claims are really checked: change one parameter so that a claim turns false, and the run
stops with ``ClaimFailed`` naming it (CONTRIBUTING.md, "Claims")."""

import pytest

pytest.importorskip("triton")

from tests.claims.mutation import run_mutated  # noqa: E402

CHAPTER = "solutions/12_triton_kernels.ipynb"


@pytest.mark.slow
@pytest.mark.notebook
def test_reread_claim_fails_when_one_value_block_covers_the_head():
    # With BV = D_v = 128 each head has one program, which reads q, k and β once: the prose's "moves more bytes than
    # one read of each input would" (true for BV = 64) must then stop the run.
    error = run_mutated(
        CHAPTER, "kernel_bytes(B, T, H, 128, 128, block_v=64)", "kernel_bytes(B, T, H, 128, 128, block_v=128)"
    )
    assert error is not None and "ClaimFailed" in error
    assert "the kernel moves more bytes than one read of each input would" in error
