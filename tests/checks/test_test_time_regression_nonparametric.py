"""Chapter 07's checks: right answers written in several ways pass (or are told what differs), and every plausible
wrong answer fails, those a reader tried on the chapter among them.

That an unattempted stub is reported is tested for every check at once in test_contract.py.
"""

import pytest
import torch

from tests.checks.gallery import assert_passes, passes_or_names
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import test_time_regression_nonparametric as checks
from ttr_edu.ops import local_linear_attention


def causal_softmax(logits):
    T = logits.shape[0]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1)


def squared_distances(q, k):
    return ((q[:, None, :] - k[None, :, :]) ** 2).sum(-1)  # (T, T)


# -- right answers, written differently --------------------------------------------------------------------------------


def nadaraya_watson(q, k, v, bandwidth):  # as in the solutions notebook
    return causal_softmax(-squared_distances(q, k) / (2 * bandwidth**2)) @ v


def nadaraya_watson_loop(q, k, v, bandwidth):  # one query at a time, exponentials normalised by hand
    out = []
    for t in range(q.shape[0]):
        logits = -((q[t] - k[: t + 1]) ** 2).sum(-1) / (2 * bandwidth**2)
        w = torch.exp(logits - logits.max())
        out.append((w / w.sum()) @ v[: t + 1])
    return torch.stack(out)


def nadaraya_watson_by_cdist(q, k, v, bandwidth):  # torch.cdist for the distances, a -inf mask added
    mask = torch.full((q.shape[0], q.shape[0]), float("-inf"), dtype=q.dtype).triu(1)
    return torch.softmax(-(torch.cdist(q, k) ** 2) / (2 * bandwidth**2) + mask, dim=-1) @ v


def nadaraya_watson_float32(q, k, v, bandwidth):  # right, but computed in float32
    return nadaraya_watson(q.float(), k.float(), v.float(), bandwidth)


def local_linear_readout(q, k, v, scale, ridge):  # as in the solutions notebook
    w = causal_softmax(scale * q @ k.T)
    out = []
    for t in range(k.shape[0]):
        w_t = w[t, : t + 1, None]
        K, V = k[: t + 1], v[: t + 1]
        k_bar, v_bar = (w_t * K).sum(0), (w_t * V).sum(0)
        cov_kk = (K - k_bar).T @ (w_t * (K - k_bar)) + ridge * torch.eye(k.shape[1], dtype=k.dtype)
        cov_vk = (V - v_bar).T @ (w_t * (K - k_bar))
        out.append(v_bar + cov_vk @ torch.linalg.solve(cov_kk, q[t] - k_bar))
    return torch.stack(out)


def local_linear_vectorised(q, k, v, scale, ridge):  # every t at once: batched moments and one batched solve
    w = causal_softmax(scale * q @ k.T)  # (T, T)
    k_bar, v_bar = w @ k, w @ v
    second = torch.einsum("ti,id,ie->tde", w, k, k)
    cov_kk = second - k_bar[:, :, None] * k_bar[:, None, :] + ridge * torch.eye(k.shape[1], dtype=k.dtype)
    cov_vk = torch.einsum("ti,ie,id->ted", w, v, k) - v_bar[:, :, None] * k_bar[:, None, :]
    x = torch.linalg.solve(cov_kk, (q - k_bar)[..., None])[..., 0]
    return v_bar + (cov_vk @ x[..., None])[..., 0]


def local_linear_by_inverse(q, k, v, scale, ridge):  # an explicit inverse: not what the hint advises, but right
    w = causal_softmax(scale * q @ k.T)
    out = []
    for t in range(k.shape[0]):
        w_t = w[t, : t + 1, None]
        K, V = k[: t + 1], v[: t + 1]
        k_bar, v_bar = (w_t * K).sum(0), (w_t * V).sum(0)
        cov_kk = (K - k_bar).T @ (w_t * (K - k_bar)) + ridge * torch.eye(k.shape[1], dtype=k.dtype)
        out.append(v_bar + (V.T @ (w_t * (K - k_bar))) @ torch.linalg.inv(cov_kk) @ (q[t] - k_bar))
    return torch.stack(out)


def local_linear_float32(q, k, v, scale, ridge):
    return local_linear_readout(q.float(), k.float(), v.float(), scale, ridge)


RIGHT = [
    (checks.check_nadaraya_watson, nadaraya_watson),
    (checks.check_nadaraya_watson, nadaraya_watson_loop),
    (checks.check_nadaraya_watson, nadaraya_watson_by_cdist),
    (checks.check_local_linear_readout, local_linear_readout),
    (checks.check_local_linear_readout, local_linear_vectorised),
    (checks.check_local_linear_readout, local_linear_by_inverse),
]


@pytest.mark.parametrize("check,answer", RIGHT, ids=lambda x: getattr(x, "__name__", ""))
def test_right_answers_pass(check, answer):
    assert_passes(check, answer)


@pytest.mark.parametrize(
    "check,answer",
    [
        (checks.check_nadaraya_watson, nadaraya_watson_float32),
        (checks.check_local_linear_readout, local_linear_float32),
    ],
)
def test_a_right_answer_in_float32_is_told_its_dtype(check, answer):
    passes_or_names(check, answer, "float32", "float64")


# -- wrong answers -----------------------------------------------------------------------------------------------------


def nw_kernel(kind):
    def nadaraya_watson(q, k, v, bandwidth):
        d2 = squared_distances(q, k)
        logits = {
            "no_half": -d2 / bandwidth**2,
            "h_not_squared": -d2 / (2 * bandwidth),
            "dot_product": q @ k.T / bandwidth**2,
            "distance_not_squared": -d2.sqrt() / (2 * bandwidth**2),
            "bandwidth_as_scale": -bandwidth * d2 / 2,
        }[kind]
        return causal_softmax(logits) @ v

    return nadaraya_watson


def non_causal_smoother(q, k, v, bandwidth):
    return torch.softmax(-squared_distances(q, k) / (2 * bandwidth**2), dim=-1) @ v


def unnormalised_kernel_sum(q, k, v, bandwidth):
    causal = torch.ones(q.shape[0], q.shape[0], dtype=q.dtype).tril()
    return (torch.exp(-squared_distances(q, k) / (2 * bandwidth**2)) * causal) @ v


def normalised_then_masked(q, k, v, bandwidth):  # the softmax over every i, the causal mask after it
    causal = torch.ones(q.shape[0], q.shape[0], dtype=q.dtype).tril()
    return (torch.softmax(-squared_distances(q, k) / (2 * bandwidth**2), dim=-1) * causal) @ v


def local_linear(kind):
    def local_linear_readout(q, k, v, scale, ridge):
        T, D = k.shape
        if kind == "gaussian_weights":
            w = causal_softmax(-scale * squared_distances(q, k) / 2)
        else:
            w = causal_softmax(scale * q @ k.T)
        out = []
        for t in range(T):
            w_t = w[t, : t + 1, None]
            K, V = k[: t + 1], v[: t + 1]
            k_bar, v_bar = (w_t * K).sum(0), (w_t * V).sum(0)
            if kind == "ridge_on_intercept":  # weighted least squares on [1, k − q], the ridge on both
                X = torch.cat([torch.ones(t + 1, 1, dtype=k.dtype), K - q[t]], 1)
                A = X.T @ (w_t * X) + ridge * torch.eye(D + 1, dtype=k.dtype)
                out.append(torch.linalg.solve(A, X.T @ (w_t * V))[0])
                continue
            cov_kk = (K - k_bar).T @ (w_t * (K - k_bar))
            cov_vk = (V - v_bar).T @ (w_t * (K - k_bar))
            if kind == "ridge_dropped":
                out.append(v_bar + cov_vk @ torch.linalg.pinv(cov_kk) @ (q[t] - k_bar))
                continue
            cov_kk = cov_kk + ridge * torch.eye(D, dtype=k.dtype)
            if kind == "uncentred":  # Σ w k kᵀ and Σ w v kᵀ without subtracting the means
                cov_kk = K.T @ (w_t * K) + ridge * torch.eye(D, dtype=k.dtype)
                cov_vk = V.T @ (w_t * K)
            x = q[t] - k_bar if kind != "sign" else k_bar - q[t]
            slope = cov_vk @ torch.linalg.solve(cov_kk, x)
            out.append(v_bar + (0 if kind == "no_slope" else slope))
        return torch.stack(out)

    return local_linear_readout


# (label, check, answer); "review:" marks the answers a reader tried on the chapter
WRONG = [
    ("review: exp(-d²/h²), the factor 2 lost", checks.check_nadaraya_watson, nw_kernel("no_half")),
    ("review: exp(-d²/(2h)), h not squared", checks.check_nadaraya_watson, nw_kernel("h_not_squared")),
    ("review: softmax(q·k/h²), a dot-product kernel", checks.check_nadaraya_watson, nw_kernel("dot_product")),
    ("review: not causal", checks.check_nadaraya_watson, non_causal_smoother),
    ("review: distance not squared", checks.check_nadaraya_watson, nw_kernel("distance_not_squared")),
    ("review: bandwidth used as the scale", checks.check_nadaraya_watson, nw_kernel("bandwidth_as_scale")),
    ("review: unnormalised kernel sum", checks.check_nadaraya_watson, unnormalised_kernel_sum),
    ("review: softmax over every i, then masked", checks.check_nadaraya_watson, normalised_then_masked),
    (
        "review: Gaussian weights instead of softmax(s q·k)",
        checks.check_local_linear_readout,
        local_linear("gaussian_weights"),
    ),
    ("review: ridge on the intercept too", checks.check_local_linear_readout, local_linear("ridge_on_intercept")),
    ("review: (k̄ − q) for (q − k̄)", checks.check_local_linear_readout, local_linear("sign")),
    ("review: ridge dropped, pinv", checks.check_local_linear_readout, local_linear("ridge_dropped")),
    ("slope forgotten", checks.check_local_linear_readout, local_linear("no_slope")),
    ("moments not centred", checks.check_local_linear_readout, local_linear("uncentred")),
]


@pytest.mark.parametrize("label,check,wrong", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_answers_fail_with_their_case(label, check, wrong):
    with pytest.raises(CheckFailed, match=r"inputs: "):
        check(wrong)


def test_the_packages_own_local_linear_attention_is_not_an_answer():
    def by_the_package(q, k, v, scale, ridge):
        o, _ = local_linear_attention(q[None, :, None], k[None, :, None], v[None, :, None], scale=scale, ridge=ridge)
        return o[0, :, 0]

    with pytest.raises(CheckFailed, match=r"calls the package's own implementation \(.*local_linear_attention"):
        checks.check_local_linear_readout(by_the_package)
