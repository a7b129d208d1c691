"""What the tests share: input builders in the fla layout, the relative error, and fla's naive references
(:mod:`tests.helpers.fla_naive`)."""

from __future__ import annotations

import torch

from ttr_edu.checks import relative_error

__all__ = ["fla_inputs", "relative_error"]


def fla_inputs(
    B: int,
    T: int,
    H: int,
    D_k: int,
    D_v: int | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    key_norm: str = "unit",
    beta: tuple[float, float] | None = None,
    max_decay: float | None = None,
    per_key_decay: bool = False,
    initial_state: bool = False,
    device: str | torch.device = "cpu",
) -> dict[str, torch.Tensor]:
    """Random inputs of the ops in the fla layout, drawn in fp64 from one seeded generator, then cast to ``dtype``.

    Args:
        B, T, H, D_k, D_v: the sizes (``D_v`` defaults to ``D_k``).
        key_norm: ``"unit"`` (L2-normalised keys: ``β ‖k‖² = β``, the delta rule's stable range), ``"scaled"``
            (Gaussian keys over ``√D_k``) or ``"raw"`` (Gaussian keys).
        beta: ``(low, high)``: a uniform ``beta`` ``(B, T, H)`` in that range; ``None``: no ``beta``.
        max_decay: a log decay ``g`` uniform in ``(−max_decay, 0]``; ``None``: no ``g``.
        per_key_decay: ``g`` of shape ``(B, T, H, D_k)`` (GLA's per-key gates) instead of ``(B, T, H)``.
        initial_state: also draw a Gaussian state ``S_0`` ``(B, H, D_k, D_v)`` as ``initial_state``.

    Returns:
        ``{"q", "k", "v"}`` plus ``"beta"``, ``"g"`` and ``"initial_state"`` as asked.
    """
    D_v = D_k if D_v is None else D_v
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k, v = rand(B, T, H, D_k), rand(B, T, H, D_k), rand(B, T, H, D_v)
    if key_norm == "unit":
        k = torch.nn.functional.normalize(k, dim=-1)
    elif key_norm == "scaled":
        k = k / D_k**0.5
    elif key_norm != "raw":
        raise ValueError(f"key_norm: expected 'unit', 'scaled' or 'raw', got {key_norm!r}")
    out = {"q": q, "k": k, "v": v}
    if beta is not None:
        low, high = beta
        out["beta"] = low + (high - low) * torch.rand(B, T, H, generator=gen, dtype=torch.float64)
    if max_decay is not None:
        shape = (B, T, H, D_k) if per_key_decay else (B, T, H)
        out["g"] = -max_decay * torch.rand(*shape, generator=gen, dtype=torch.float64)
    if initial_state:
        out["initial_state"] = rand(B, H, D_k, D_v)
    return {name: x.to(device=device, dtype=dtype) for name, x in out.items()}


def start_as_in_a_terminal(command, **popen_kwargs):
    """Start ``command`` (text I/O) for a test that will press Ctrl-C in it: in a session of its own, so the test can
    signal its whole process group as a terminal does, with SIGINT at its default. A pytest worker may run with
    SIGINT ignored, the child inherits that, and Python installs no KeyboardInterrupt handler under an ignored
    SIGINT: the Ctrl-C would then never arrive. A blocked SIGINT is inherited too (a CI runner may start the tests
    with it masked), so it is unblocked as well: a terminal's foreground job has it neither ignored nor blocked."""
    import signal
    import subprocess

    def sigint_at_default():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    return subprocess.Popen(command, text=True, start_new_session=True, preexec_fn=sigint_at_default, **popen_kwargs)
