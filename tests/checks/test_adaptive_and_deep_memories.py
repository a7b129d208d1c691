"""Chapter 08's checks accept a correct answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import math
import re

import pytest
import torch
from torch.func import grad

from tests.checks.gallery import assert_passes, passes_or_names
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import adaptive_and_deep_memories as checks


# Correct answers, written the way a student would (as in the solutions notebook).
def longhorn_step(S, k, v, beta):
    eps = beta / (1 + beta * (k @ k))
    return S + eps * torch.outer(k, v - S.T @ k)


def momentum_step(S, U, k, v, beta, eta, alpha):
    U_new = eta * U - beta * torch.outer(k, S.T @ k - v)
    return (1 - alpha) * S + U_new, U_new


def mlp_loss(W1, W2, k, v):
    return 0.5 * ((torch.nn.functional.gelu(k @ W1) @ W2 - v) ** 2).sum()


def mlp_gradient_by_torch_func(W1, W2, k, v, lr):  # right numbers, but autograd: the exercise rules it out
    g1, g2 = torch.func.grad(mlp_loss, argnums=(0, 1))(W1, W2, k, v)
    return W1 - lr * g1, W2 - lr * g2


def mlp_gradient_by_backward(W1, W2, k, v, lr):  # the same with .backward()
    W1, W2 = W1.clone().requires_grad_(), W2.clone().requires_grad_()
    mlp_loss(W1, W2, k, v).backward()
    return (W1 - lr * W1.grad).detach(), (W2 - lr * W2.grad).detach()


def mlp_gradient_step_by_hand(W1, W2, k, v, lr):  # the exercise's own way: both gradients written out
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    gelu_prime = torch.special.ndtr(a) + a * torch.exp(-0.5 * a**2) / math.sqrt(2 * math.pi)
    return W1 - lr * torch.outer(k, gelu_prime * (W2 @ delta)), W2 - lr * torch.outer(h, delta)


def unit(angle):
    return torch.tensor([math.cos(angle), math.sin(angle)], dtype=torch.float64)


def rotation_keys(theta):
    return unit(0.0), unit(theta / 2)


def rotation_keys_turned(theta):  # any pair at the right angle apart is right, and a key's sign does not matter
    return unit(1.0), -unit(1.0 + theta / 2)


CHECKS = [
    (checks.check_longhorn_step, longhorn_step),
    (checks.check_rotation_keys, rotation_keys),
    (checks.check_rotation_keys, rotation_keys_turned),
    (checks.check_mlp_gradient_step, mlp_gradient_step_by_hand),
    (checks.check_momentum_step, momentum_step),
]


@pytest.mark.parametrize("check,answer", CHECKS)
def test_a_correct_answer_passes(check, answer, capsys):
    assert check(answer) is True
    out = capsys.readouterr().out
    assert out.startswith("PASS")
    # a float64 answer is never told it was computed in float32: at θ = π/2 the transition's off-diagonal 2⁻⁵² of a
    # right answer is a float32 number by chance, where the reference has cos(π/2) ≈ 6e-17 (a false note before)
    assert "float32" not in out, out


# Plausible wrong answers.
def explicit_step(S, k, v, beta):  # the delta rule's step β, not the implicit ε
    return S + beta * torch.outer(k, v - S.T @ k)


def step_without_key_norm(S, k, v, beta):  # ε = β / (1 + β): right only for unit keys
    return S + beta / (1 + beta) * torch.outer(k, v - S.T @ k)


def diagonal_longhorn(S, k, v, beta):  # the published layer's diagonal approximation, not the exact step
    eps = beta / (1 + beta * (k @ k))
    return (1 - eps * k[:, None] ** 2) * S + eps * torch.outer(k, v)


def in_place_longhorn(S, k, v, beta):  # right value, but the caller's S is overwritten
    S += beta / (1 + beta * (k @ k)) * torch.outer(k, v - S.T @ k)
    return S


def decay_after_momentum(S, U, k, v, beta, eta, alpha):  # (1 − α) also shrinks the new step
    U_new = eta * U - beta * torch.outer(k, S.T @ k - v)
    return (1 - alpha) * (S + U_new), U_new


def alpha_as_keep(S, U, k, v, beta, eta, alpha):  # α read as the fraction kept
    U_new = eta * U - beta * torch.outer(k, S.T @ k - v)
    return alpha * S + U_new, U_new


def gradient_ascent(S, U, k, v, beta, eta, alpha):  # the sign of the gradient flipped
    U_new = eta * U + beta * torch.outer(k, S.T @ k - v)
    return (1 - alpha) * S + U_new, U_new


def momentum_after_gradient(S, U, k, v, beta, eta, alpha):  # η multiplies the new gradient too
    U_new = eta * (U - beta * torch.outer(k, S.T @ k - v))
    return (1 - alpha) * S + U_new, U_new


def loss_without_half(W1, W2, k, v, lr):  # ‖·‖² without ½: twice the step
    g1, g2 = grad(lambda a, b: 2 * mlp_loss(a, b, k, v), argnums=(0, 1))(W1, W2)
    return W1 - lr * g1, W2 - lr * g2


def tanh_gelu(W1, W2, k, v, lr):  # the tanh approximation of GELU
    loss = lambda a, b: 0.5 * ((torch.nn.functional.gelu(k @ a, approximate="tanh") @ b - v) ** 2).sum()
    g1, g2 = grad(loss, argnums=(0, 1))(W1, W2)
    return W1 - lr * g1, W2 - lr * g2


def only_last_layer(W1, W2, k, v, lr):  # W1 left untouched
    g2 = grad(mlp_loss, argnums=1)(W1, W2, k, v)
    return W1, W2 - lr * g2


def second_layer_at_new_first(W1, W2, k, v, lr):  # layers updated one after the other, not at the same point
    g1 = grad(mlp_loss, argnums=0)(W1, W2, k, v)
    W1 = W1 - lr * g1
    g2 = grad(mlp_loss, argnums=1)(W1, W2, k, v)
    return W1, W2 - lr * g2


def keys_a_full_angle_apart(theta):  # two reflections rotate by twice the angle between their keys
    return unit(0.0), unit(theta)


def keys_in_the_wrong_order(theta):  # k2 first: the rotation by −θ
    k1, k2 = rotation_keys(theta)
    return k2, k1


def keys_the_other_way(theta):  # the half angle with the wrong sign: also −θ
    return unit(0.0), unit(-theta / 2)


def keys_not_normalised(theta):  # the right direction, but I − 2kkᵀ is then no reflection
    return unit(0.0), torch.tensor([1.0, math.tan(theta / 4)], dtype=torch.float64)


def keys_always_orthogonal(theta):  # two orthogonal reflections: −I, a half turn whatever θ
    return unit(0.0), unit(math.pi / 2)


def rotation_rows(theta):  # the rows of R(θ), not keys
    return unit(theta), unit(theta + math.pi / 2)


def keys_of_wrong_shape(theta):  # column vectors
    k1, k2 = rotation_keys(theta)
    return k1[:, None], k2[:, None]


def mlp_gradient_without_gelu_derivative(W1, W2, k, v, lr):  # back-propagated through W2 but not through GELU
    h = torch.nn.functional.gelu(k @ W1)
    delta = h @ W2 - v
    return W1 - lr * torch.outer(k, W2 @ delta), W2 - lr * torch.outer(h, delta)


def mlp_gradient_with_relu_derivative(W1, W2, k, v, lr):  # GELU′ taken as the step function of ReLU
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    return W1 - lr * torch.outer(k, (a > 0).double() * (W2 @ delta)), W2 - lr * torch.outer(h, delta)


def mlp_gradient_transposed_w2(W1, W2, k, v, lr):  # W2ᵀ δ where W2 δ belongs (square when D_h = D_v only)
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    gelu_prime = torch.special.ndtr(a) + a * torch.exp(-0.5 * a**2) / math.sqrt(2 * math.pi)
    back = (W2.T @ delta[: W2.shape[1]]) if W2.shape[0] == W2.shape[1] else delta.sum() * W2.sum(1)
    return W1 - lr * torch.outer(k, gelu_prime * back), W2 - lr * torch.outer(h, delta)


WRONG = [
    ("rotation: keys θ apart", checks.check_rotation_keys, keys_a_full_angle_apart),
    ("rotation: keys in the wrong order", checks.check_rotation_keys, keys_in_the_wrong_order),
    ("rotation: half angle negated", checks.check_rotation_keys, keys_the_other_way),
    ("rotation: keys not unit vectors", checks.check_rotation_keys, keys_not_normalised),
    ("rotation: always orthogonal keys", checks.check_rotation_keys, keys_always_orthogonal),
    ("rotation: rows of R instead of keys", checks.check_rotation_keys, rotation_rows),
    ("rotation: keys of shape (2, 1)", checks.check_rotation_keys, keys_of_wrong_shape),
    ("MLP by hand: GELU′ forgotten", checks.check_mlp_gradient_step, mlp_gradient_without_gelu_derivative),
    ("MLP by hand: ReLU′ for GELU′", checks.check_mlp_gradient_step, mlp_gradient_with_relu_derivative),
    ("MLP by hand: wrong back-propagation through W2", checks.check_mlp_gradient_step, mlp_gradient_transposed_w2),
    ("Longhorn: explicit step β", checks.check_longhorn_step, explicit_step),
    ("Longhorn: ‖k‖² forgotten", checks.check_longhorn_step, step_without_key_norm),
    ("Longhorn: diagonal approximation", checks.check_longhorn_step, diagonal_longhorn),
    ("Longhorn: S modified in place", checks.check_longhorn_step, in_place_longhorn),
    ("momentum: decay after the step", checks.check_momentum_step, decay_after_momentum),
    ("momentum: alpha as the kept fraction", checks.check_momentum_step, alpha_as_keep),
    ("momentum: gradient ascent", checks.check_momentum_step, gradient_ascent),
    ("momentum: eta on the new gradient", checks.check_momentum_step, momentum_after_gradient),
    ("MLP: loss without ½", checks.check_mlp_gradient_step, loss_without_half),
    ("MLP: tanh GELU", checks.check_mlp_gradient_step, tanh_gelu),
    ("MLP: last layer only", checks.check_mlp_gradient_step, only_last_layer),
    ("MLP: layers updated in turn", checks.check_mlp_gradient_step, second_layer_at_new_first),
    ("MLP: autograd (torch.func.grad)", checks.check_mlp_gradient_step, mlp_gradient_by_torch_func),
    ("MLP: autograd (.backward())", checks.check_mlp_gradient_step, mlp_gradient_by_backward),
]


@pytest.mark.parametrize("label,check,wrong", WRONG, ids=[w[0] for w in WRONG])
def test_plausible_wrong_answers_are_rejected(label, check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)


def test_the_explicit_step_fails_on_a_case_that_shows_how_far_off_it_is():
    # the first case has β‖k‖² = 4.5: the explicit step is off by a relative error of order one there, not 1e-4 (a
    # near miss to the eye) as when the first key happened to be almost zero
    with pytest.raises(CheckFailed) as failure:
        checks.check_longhorn_step(explicit_step)
    error = float(str(failure.value).split("relative error ")[1].split(")")[0])
    assert error > 1.0


def mlp_gradient_by_forward_mode(W1, W2, k, v, lr):  # forward-mode autodiff: autograd all the same
    def loss(W1, W2):
        return 0.5 * ((torch.nn.functional.gelu(k @ W1) @ W2 - v) ** 2).sum()

    dW1 = torch.func.jacfwd(loss, argnums=0)(W1, W2)
    dW2 = torch.func.jacfwd(loss, argnums=1)(W1, W2)
    return W1 - lr * dW1, W2 - lr * dW2


def test_autograd_is_named_as_ruled_out():
    with pytest.raises(CheckFailed, match=r"used autograd \(torch\.func\.grad\).*write both gradients out"):
        checks.check_mlp_gradient_step(mlp_gradient_by_torch_func)
    with pytest.raises(CheckFailed, match=r"used autograd \(torch\.Tensor\.backward\)"):
        checks.check_mlp_gradient_step(mlp_gradient_by_backward)
    with pytest.raises(CheckFailed, match=r"used autograd \(torch\.func\.jacfwd\)"):
        checks.check_mlp_gradient_step(mlp_gradient_by_forward_mode)


# -- the review's answers, and more right answers written differently ------------------------------------------------


def longhorn_by_solve(S, k, v, beta):  # the normal equations (I + β k kᵀ) S' = S + β k vᵀ, solved: right
    return torch.linalg.solve(
        torch.eye(k.shape[0], dtype=k.dtype) + beta * torch.outer(k, k), S + beta * torch.outer(k, v)
    )


def longhorn_by_sherman_morrison(S, k, v, beta):  # (I + β k kᵀ)⁻¹ written out: right
    inverse = torch.eye(k.shape[0], dtype=k.dtype) - beta * torch.outer(k, k) / (1 + beta * k @ k)
    return inverse @ (S + beta * torch.outer(k, v))


def longhorn_float32(S, k, v, beta):
    return longhorn_step(S.float(), k.float(), v.float(), beta)


def longhorn_half_weight(S, k, v, beta):  # the objective read with β/2
    return S + (beta / 2) / (1 + beta / 2 * (k @ k)) * torch.outer(k, v - S.T @ k)


def longhorn_norm_not_squared(S, k, v, beta):  # ε = β / (1 + β ‖k‖)
    return S + beta / (1 + beta * k.norm()) * torch.outer(k, v - S.T @ k)


def rotation_keys_float32(theta):  # right keys, but torch.tensor's default dtype
    return torch.tensor([1.0, 0.0]), torch.tensor([math.cos(theta / 2), math.sin(theta / 2)])


def rotation_keys_as_a_list(theta):  # a list of two keys, both turned by 0.3: right
    return [unit(0.3), unit(0.3 + theta / 2)]


def keys_a_quarter_angle(theta):
    return unit(0.0), unit(theta / 4)


def keys_e2_then_half_angle(theta):
    return unit(math.pi / 2), unit(theta / 2)


def momentum_loop(S, U, k, v, beta, eta, alpha):  # the gradient entry by entry, as its definition reads: right
    grad_S = torch.empty_like(S)
    error = S.T @ k - v
    for i in range(S.shape[0]):
        for j in range(S.shape[1]):
            grad_S[i, j] = k[i] * error[j]
    U_new = eta * U - beta * grad_S
    return (1 - alpha) * S + U_new, U_new


def momentum_returns_u_s(S, U, k, v, beta, eta, alpha):
    S_new, U_new = momentum_step(S, U, k, v, beta, eta, alpha)
    return U_new, S_new


def momentum_ema(S, U, k, v, beta, eta, alpha):  # an exponential moving average of the gradient
    U_new = eta * U - (1 - eta) * beta * torch.outer(k, S.T @ k - v)
    return (1 - alpha) * S + U_new, U_new


def momentum_gradient_at_decayed_state(S, U, k, v, beta, eta, alpha):
    U_new = eta * U - beta * torch.outer(k, (1 - alpha) * S.T @ k - v)
    return (1 - alpha) * S + U_new, U_new


def momentum_by_autograd(S, U, k, v, beta, eta, alpha):  # the gradient the text asks to derive, from autograd
    S_leaf = S.clone().requires_grad_()
    (grad_S,) = torch.autograd.grad(0.5 * ((S_leaf.T @ k - v) ** 2).sum(), S_leaf)
    U_new = eta * U - beta * grad_S
    return (1 - alpha) * S + U_new, U_new


def mlp_by_hand(kind):
    def mlp_gradient_step(W1, W2, k, v, lr):
        a = k @ W1
        h = torch.nn.functional.gelu(a, approximate="tanh" if kind == "tanh" else "none")
        delta = h @ W2 - v
        gelu_prime = torch.special.ndtr(a) + a * torch.exp(-0.5 * a**2) / math.sqrt(2 * math.pi)
        if kind == "erf":  # Φ through erf: right
            gelu_prime = 0.5 * (1 + torch.erf(a / math.sqrt(2))) + a * torch.exp(-0.5 * a**2) / math.sqrt(2 * math.pi)
        if kind == "phi_only":
            gelu_prime = torch.special.ndtr(a)
        if kind == "no_sqrt_2pi":
            gelu_prime = torch.special.ndtr(a) + a * torch.exp(-0.5 * a**2)
        if kind == "tanh":
            c = math.sqrt(2 / math.pi)
            th = torch.tanh(c * (a + 0.044715 * a**3))
            gelu_prime = 0.5 * (1 + th) + 0.5 * a * (1 - th**2) * c * (1 + 3 * 0.044715 * a**2)
        g2, g1 = torch.outer(h, delta), torch.outer(k, gelu_prime * (W2 @ delta))
        if kind == "sequential":  # W1's gradient at the updated W2
            W2_new = W2 - lr * g2
            return W1 - lr * torch.outer(k, gelu_prime * (W2_new @ delta)), W2_new
        if kind == "mean_loss":
            g1, g2 = g1 / v.numel(), g2 / v.numel()
        return W1 - lr * g1, W2 - lr * g2

    return mlp_gradient_step


def _loss(W1, W2, k, v):
    return 0.5 * ((torch.nn.functional.gelu(k @ W1) @ W2 - v) ** 2).sum()


def mlp_by_jacfwd(W1, W2, k, v, lr):  # forward-mode autodiff: still autograd
    g1 = torch.func.jacfwd(_loss, argnums=0)(W1, W2, k, v)
    g2 = torch.func.jacfwd(_loss, argnums=1)(W1, W2, k, v)
    return W1 - lr * g1, W2 - lr * g2


def mlp_by_prebound_grad(W1, W2, k, v, lr, transform=grad):  # torch.func.grad bound before the check ran
    g1, g2 = transform(_loss, argnums=(0, 1))(W1, W2, k, v)
    return W1 - lr * g1, W2 - lr * g2


def mlp_by_autograd_grad(W1, W2, k, v, lr):
    A, B = W1.clone().requires_grad_(), W2.clone().requires_grad_()
    g1, g2 = torch.autograd.grad(_loss(A, B, k, v), (A, B))
    return W1 - lr * g1, W2 - lr * g2


def mlp_by_functional_jacobian(W1, W2, k, v, lr):
    g1, g2 = torch.autograd.functional.jacobian(lambda A, B: _loss(A, B, k, v), (W1, W2))
    return W1 - lr * g1, W2 - lr * g2


def mlp_by_vjp(W1, W2, k, v, lr):
    _, pullback = torch.func.vjp(lambda A, B: _loss(A, B, k, v), W1, W2)
    g1, g2 = pullback(torch.ones((), dtype=W1.dtype))
    return W1 - lr * g1, W2 - lr * g2


def mlp_by_forward_ad(W1, W2, k, v, lr):  # dual numbers, one direction per entry
    import torch.autograd.forward_ad as fwAD

    grads = []
    for index, W in enumerate((W1, W2)):
        g = torch.zeros_like(W)
        for i in range(W.numel()):
            tangent = torch.zeros_like(W).flatten()
            tangent[i] = 1.0
            with fwAD.dual_level():
                dual = fwAD.make_dual(W, tangent.view_as(W))
                args = (dual, W2) if index == 0 else (W1, dual)
                g.view(-1)[i] = fwAD.unpack_dual(_loss(*args, k, v)).tangent
        grads.append(g)
    return W1 - lr * grads[0], W2 - lr * grads[1]


def mlp_in_a_thread(W1, W2, k, v, lr):  # autograd hidden in a worker thread
    import threading

    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("step", mlp_by_autograd_grad(W1, W2, k, v, lr)))
    worker.start()
    worker.join()
    return out["step"]


def _gelu_prime(a):
    return torch.special.ndtr(a) + a * torch.exp(-0.5 * a**2) / math.sqrt(2 * math.pi)


def mlp_entry_loop_into_a_clone(W1, W2, k, v, lr):  # each new entry is copied into a clone of W2 (a reviewer's)
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    d = h @ W2 - v
    W2_new = W2.clone()
    for j in range(W2.shape[0]):
        for m in range(W2.shape[1]):
            W2_new[j, m] = W2[j, m] - lr * h[j] * d[m]
    return W1 - lr * torch.outer(k, _gelu_prime(a) * (W2 @ d)), W2_new


def mlp_gradient_rows(W1, W2, k, v, lr):  # rows h_j d: two hidden units of nearly equal h_j give proportional rows
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    d = h @ W2 - v
    G2 = torch.empty_like(W2)
    for j in range(W2.shape[0]):
        G2[j] = h[j] * d
    return W1 - lr * torch.outer(k, _gelu_prime(a) * (W2 @ d)), W2 - lr * G2


def mlp_loop_over_hidden_units(W1, W2, k, v, lr):
    """8.4 column by column: ``k`` times GELU′(a_j), a number the answer computed that lies within 1 % of 1 for
    many units (near a ≈ 0.75 and for large a); a product, not a displaced copy, since nothing is evaluated there."""
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    W1_new, W2_new = W1.clone(), W2.clone()
    for j in range(W1.shape[1]):
        phi = torch.exp(-(a[j] ** 2) / 2) / math.sqrt(2 * math.pi)
        gelu_prime = torch.special.ndtr(a[j]) + a[j] * phi
        W1_new[:, j] = W1[:, j] - lr * k * gelu_prime * (W2[j] @ delta)
        W2_new[j] = W2[j] - lr * h[j] * delta
    return W1_new, W2_new


def mlp_columns_stacked(W1, W2, k, v, lr):
    """8.4 as a list of updated columns, stacked (review r40): each column is W1's moved by a small step, gathered,
    never evaluated at."""
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    back = (torch.special.ndtr(a) + a * torch.exp(-(a**2) / 2) / math.sqrt(2 * math.pi)) * (W2 @ delta)
    W1_new = torch.stack([W1[:, j] - lr * back[j] * k for j in range(W1.shape[1])], dim=1)
    return W1_new, torch.stack([W2[j] - lr * h[j] * delta for j in range(W2.shape[0])])


def test_more_right_answers_pass(capsys):
    for check, answer in [
        (checks.check_longhorn_step, longhorn_by_solve),
        (checks.check_longhorn_step, longhorn_by_sherman_morrison),
        (checks.check_rotation_keys, rotation_keys_as_a_list),
        (checks.check_momentum_step, momentum_loop),
        (checks.check_mlp_gradient_step, mlp_by_hand("erf")),
        (checks.check_mlp_gradient_step, mlp_entry_loop_into_a_clone),
        (checks.check_mlp_gradient_step, mlp_gradient_rows),
        (checks.check_mlp_gradient_step, mlp_loop_over_hidden_units),
        (checks.check_mlp_gradient_step, mlp_columns_stacked),
    ]:
        assert_passes(check, answer)


def test_right_answers_in_float32_are_told_their_dtype(capsys):
    passes_or_names(checks.check_longhorn_step, longhorn_float32, "float32", "float64")
    # review r35h: computed in float32 and widened, 8.1 passed without a word, where 8.2 names the dtype
    assert checks.check_longhorn_step(lambda S, k, v, beta: longhorn_float32(S, k, v, beta).double())
    assert "every value in it is a float32 number" in capsys.readouterr().out
    # review: float32 keys failed with "relative error 4.84e-08" and no word about the dtype
    message = passes_or_names(checks.check_rotation_keys, rotation_keys_float32, "float32", "float64")
    assert "keys" in message
    # the dtype first, both named, and only then the values
    assert message.startswith("rotation_keys: wrong dtype: your result is float32, the exercise works in float64")


REVIEW_WRONG = [  # the answers a reader tried on 08 (besides the right ones above and in the first gallery)
    ("8.1 explicit step", checks.check_longhorn_step, explicit_step),
    ("8.1 ε = β/(1+β)", checks.check_longhorn_step, step_without_key_norm),
    ("8.1 half-weighted objective", checks.check_longhorn_step, longhorn_half_weight),
    ("8.1 ‖k‖ not squared", checks.check_longhorn_step, longhorn_norm_not_squared),
    ("8.2 k2 at θ", checks.check_rotation_keys, keys_a_full_angle_apart),
    ("8.2 k2 at −θ/2", checks.check_rotation_keys, keys_the_other_way),
    ("8.2 order swapped", checks.check_rotation_keys, keys_in_the_wrong_order),
    ("8.2 k1 = e2", checks.check_rotation_keys, keys_e2_then_half_angle),
    ("8.2 k2 at θ/4", checks.check_rotation_keys, keys_a_quarter_angle),
    ("8.3 decay applied to S + U'", checks.check_momentum_step, decay_after_momentum),
    ("8.3 returns (U, S)", checks.check_momentum_step, momentum_returns_u_s),
    ("8.3 EMA momentum", checks.check_momentum_step, momentum_ema),
    ("8.3 gradient at the decayed state", checks.check_momentum_step, momentum_gradient_at_decayed_state),
    ("8.3 α as retention", checks.check_momentum_step, alpha_as_keep),
    ("8.4 tanh GELU", checks.check_mlp_gradient_step, mlp_by_hand("tanh")),
    ("8.4 GELU′ = Φ only", checks.check_mlp_gradient_step, mlp_by_hand("phi_only")),
    ("8.4 φ without 1/√(2π)", checks.check_mlp_gradient_step, mlp_by_hand("no_sqrt_2pi")),
    ("8.4 W1's gradient at the new W2", checks.check_mlp_gradient_step, mlp_by_hand("sequential")),
    ("8.4 loss averaged over D_v", checks.check_mlp_gradient_step, mlp_by_hand("mean_loss")),
]


@pytest.mark.parametrize("label,check,wrong", REVIEW_WRONG, ids=[w[0] for w in REVIEW_WRONG])
def test_the_reviews_wrong_answers_fail(label, check, wrong):
    with pytest.raises(CheckFailed, match=r"inputs: |expected two"):
        check(wrong)


@pytest.mark.parametrize(
    "answer,spelled",
    [
        (mlp_gradient_by_backward, r"torch\.Tensor\.backward"),  # review: caught before
        (mlp_by_prebound_grad, r"torch\.func\.grad"),  # review: caught before
        (mlp_by_jacfwd, r"torch\.func\.jacfwd"),  # review: passed before
        (mlp_gradient_by_torch_func, r"torch\.func\.grad"),
        (mlp_by_autograd_grad, r"torch\.autograd\.grad"),
        (mlp_by_functional_jacobian, r"torch\.autograd\.functional\.jacobian"),
        (mlp_by_vjp, r"torch\.func\.vjp"),
        (mlp_by_forward_ad, r"torch\.autograd\.forward_ad\.make_dual"),
        (mlp_in_a_thread, r"torch\.autograd\.grad"),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_autograd_is_refused_however_it_is_spelled(answer, spelled):
    with pytest.raises(CheckFailed, match=rf"used autograd \({spelled}\).*rules out: write both gradients out"):
        checks.check_mlp_gradient_step(answer)


def test_the_momentum_gradient_is_derived_not_taken_from_autograd():
    with pytest.raises(CheckFailed, match=r"used autograd \(torch\.autograd\.grad\).*derive ∇_S ℓ"):
        checks.check_momentum_step(momentum_by_autograd)


def momentum_by_forward_ad(S, U, k, v, beta, eta, alpha):  # review r35j: crashed the process (the watch computed
    import torch.autograd.forward_ad as fwAD  # on the dual tensors' results)

    G = torch.zeros_like(S)
    with fwAD.dual_level():
        for i in range(S.shape[0]):
            for j in range(S.shape[1]):
                E = torch.zeros_like(S)
                E[i, j] = 1
                X = fwAD.make_dual(S, E)
                G[i, j] = fwAD.unpack_dual(0.5 * ((X.T @ k - v) ** 2).sum()).tangent
    U = eta * U - beta * G
    return (1 - alpha) * S + U, U


def test_forward_ad_is_refused_without_crashing():
    with pytest.raises(CheckFailed, match=r"used autograd \(torch\.autograd\.forward_ad\.make_dual\).*derive ∇_S ℓ"):
        checks.check_momentum_step(momentum_by_forward_ad)


def test_the_packages_own_steps_are_not_answers():
    from ttr_edu.ops import longhorn_step_size

    def by_step_size(S, k, v, beta):
        eps = longhorn_step_size(torch.tensor(beta, dtype=k.dtype), k)
        return S + eps * torch.outer(k, v - S.T @ k)

    with pytest.raises(CheckFailed, match=r"calls the package's own implementation \(.*longhorn_step_size"):
        checks.check_longhorn_step(by_step_size)
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation \(.*rotation_keys_spec"):
        checks.check_rotation_keys(checks.rotation_keys_spec)


# -- finite differences and autograd's derivative kernels: right numbers, but not the derivation the text asks for ----


def momentum_by_finite_differences(S, U, k, v, beta, eta, alpha):  # central differences: exact for a quadratic
    grad_S, h = torch.zeros_like(S), 1e-4
    for i in range(S.shape[0]):
        for j in range(S.shape[1]):
            E = torch.zeros_like(S)
            E[i, j] = h
            up, down = (0.5 * ((X.T @ k - v) ** 2).sum() for X in (S + E, S - E))
            grad_S[i, j] = (up - down) / (2 * h)
    U_new = eta * U - beta * grad_S
    return (1 - alpha) * S + U_new, U_new


def _batched_differences(X, loss, h):  # every weight perturbed at once, one batched evaluation
    E = h * torch.eye(X.numel(), dtype=X.dtype).view(X.numel(), *X.shape)
    return ((loss(X + E) - loss(X - E)) / (2 * h)).view_as(X)


def momentum_by_batched_differences(S, U, k, v, beta, eta, alpha):
    grad_S = _batched_differences(S, lambda X: 0.5 * ((X.transpose(-1, -2) @ k - v) ** 2).sum(-1), 1e-4)
    U_new = eta * U - beta * grad_S
    return (1 - alpha) * S + U_new, U_new


def mlp_by_finite_differences(W1, W2, k, v, lr):
    def numeric(X, loss, h=1e-5):
        G = torch.zeros_like(X)
        for i in range(X.numel()):
            E = torch.zeros(X.numel(), dtype=X.dtype)
            E[i] = h
            G.view(-1)[i] = (loss(X + E.view_as(X)) - loss(X - E.view_as(X))) / (2 * h)
        return G

    return (
        W1 - lr * numeric(W1, lambda A: mlp_loss(A, W2, k, v)),
        W2 - lr * numeric(W2, lambda B: mlp_loss(W1, B, k, v)),
    )


def mlp_by_batched_differences(W1, W2, k, v, lr):
    def loss1(A):
        return 0.5 * ((torch.nn.functional.gelu(k @ A) @ W2 - v) ** 2).sum(-1)

    def loss2(B):
        return 0.5 * ((torch.nn.functional.gelu(k @ W1) @ B - v) ** 2).sum(-1)

    return W1 - lr * _batched_differences(W1, loss1, 1e-5), W2 - lr * _batched_differences(W2, loss2, 1e-5)


def mlp_by_gelu_backward(W1, W2, k, v, lr):  # GELU′ from autograd's own derivative kernel
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    return W1 - lr * torch.outer(k, torch.ops.aten.gelu_backward(W2 @ delta, a)), W2 - lr * torch.outer(h, delta)


@pytest.mark.parametrize(
    "check,answer",
    [
        (checks.check_momentum_step, momentum_by_finite_differences),
        (checks.check_momentum_step, momentum_by_batched_differences),
        (checks.check_mlp_gradient_step, mlp_by_finite_differences),
        (checks.check_mlp_gradient_step, mlp_by_batched_differences),
    ],
    ids=["8.3 looped", "8.3 batched", "8.4 looped", "8.4 batched"],
)
def test_finite_differences_are_refused(check, answer):
    with pytest.raises(CheckFailed, match=r"numbers per weight|per weight \(a derived gradient"):
        check(answer)


def mlp_by_gelu_backward_in_inference_mode(W1, W2, k, v, lr):  # the same, below autograd's dispatch keys
    with torch.inference_mode():
        return tuple(W.clone() for W in mlp_by_gelu_backward(W1, W2, k, v, lr))


@pytest.mark.parametrize("answer", [mlp_by_gelu_backward, mlp_by_gelu_backward_in_inference_mode])
def test_autograds_derivative_kernels_are_refused(answer):
    with pytest.raises(CheckFailed, match=r"derivative kernel \(torch\.ops\.aten\.gelu_backward\)"):
        checks.check_mlp_gradient_step(answer)


# -- review r35c: finite differences that wrote few numbers, and in Python floats -------------------------------------


def _mlp_step_with(gelu_prime_of):
    """8.4 by the chain rule, with GELU′ from ``gelu_prime_of(a, W1, k)``: the rest written out."""

    def mlp_gradient_step(W1, W2, k, v, lr):
        a = k @ W1
        h = torch.nn.functional.gelu(a)
        delta = h @ W2 - v
        gelu_prime = gelu_prime_of(a, W1, k)
        return W1 - lr * torch.outer(k, gelu_prime * (W2 @ delta)), W2 - lr * torch.outer(h, delta)

    return mlp_gradient_step


_gelu = torch.nn.functional.gelu


def _central(a, W1, k, eps=1e-6):  # review r35c: passed, it writes only a few numbers per weight
    return (_gelu(a + eps) - _gelu(a - eps)) / (2 * eps)


def _forward(a, W1, k, eps=1e-8):
    return (_gelu(a + eps) - _gelu(a)) / eps


def _relative_by_a_tensor(a, W1, k):  # the factor 1 + ε as a tensor written in the code, not a Python number
    factor = 1 + torch.tensor(1e-6, dtype=a.dtype)
    return (_gelu(a * factor) - _gelu(a)) / (a * (factor - 1))


def _relative_by_a_computed_factor(a, W1, k):  # the factor computed from the answer's own numbers
    factor = 1 + 1e-6 * a.abs().max() / a.abs().max()
    return (_gelu(a * factor) - _gelu(a)) / (a * (factor - 1))


def _computed_factor(a):  # 1 + 1e-6 as a number the answer computed from its own (review r40)
    return 1 + 1e-6 * a.abs().max() / a.abs().max()


def _relative_then_cloned(a, W1, k):  # the scaled copy cloned before the activation reads it
    up, down = (a * _computed_factor(a)).clone(), (a / _computed_factor(a)).clone()
    return (_gelu(up) - _gelu(down)) / (up - down)


def _relative_points_stacked(a, W1, k):  # both points in one stacked tensor, one activation call
    f = _computed_factor(a)
    points = torch.stack([a * f, a / f])
    values = _gelu(points)
    return (values[0] - values[1]) / (points[0] - points[1])


def _relative_through_the_weights(a, W1, k):  # W1 scaled, the points reached through the matrix product
    f = _computed_factor(a)
    up, down = k @ (W1 * f), k @ (W1 / f)
    return (_gelu(up) - _gelu(down)) / (up - down)


def _relative_through_gelu_by_hand(a, W1, k):  # GELU written out: erf reads (a f)/√2, not a f itself
    def gelu(x):
        return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))

    f = _computed_factor(a)
    return (gelu(a * f) - gelu(a / f)) / (a * f - a / f)


def _entry_by_entry(a, W1, k, eps=1e-5):
    out = torch.empty_like(a)
    for i in range(a.numel()):
        out[i] = (_gelu(a[i] + eps) - _gelu(a[i] - eps)) / (2 * eps)
    return out


def _relative_step_by_entry(a, W1, k, eps=1e-6):
    out = torch.empty_like(a)
    for i in range(a.numel()):
        out[i] = (_gelu(a[i] * (1 + eps)) - _gelu(a[i] * (1 - eps))) / (2 * eps * a[i])
    return out


def _in_place_steps(a, W1, k, eps=1e-6):
    up, down = a.clone(), a.clone()
    up += eps
    down -= eps
    return (_gelu(up) - _gelu(down)) / (2 * eps)


def _weights_moved(a, W1, k, eps=1e-6):  # W1 + ε moves every pre-activation by ε Σk
    return (_gelu(k @ (W1 + eps)) - _gelu(k @ (W1 - eps))) / (2 * eps * k.sum())


def _points_built_apart(a, W1, k, eps=1e-6):  # a ± ε from a fused product, never as a + ε
    bias = torch.full((W1.shape[1],), eps, dtype=W1.dtype)
    return (_gelu(torch.addmv(bias, W1.T, k)) - _gelu(torch.addmv(-bias, W1.T, k))) / (2 * eps)


def _stacked_points(a, W1, k, eps=1e-6):
    values = _gelu(a[None] + torch.tensor([[eps], [-eps]], dtype=a.dtype))
    return (values[0] - values[1]) / (2 * eps)


def _in_python_floats(a, W1, k, eps=1e-6):
    def gelu(x):
        return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))

    return torch.tensor([(gelu(x + eps) - gelu(x - eps)) / (2 * eps) for x in a.tolist()], dtype=a.dtype)


def momentum_by_python_differences(S, U, k, v, beta, eta, alpha):  # review r35c: passed, invisible to torch
    rows, key, value, h = S.tolist(), k.tolist(), v.tolist(), 1e-6

    def loss(M):
        return 0.5 * sum((sum(M[i][j] * key[i] for i in range(len(key))) - value[j]) ** 2 for j in range(len(value)))

    grad = [[0.0] * len(value) for _ in key]
    for i in range(len(key)):
        for j in range(len(value)):
            up, down = [r[:] for r in rows], [r[:] for r in rows]
            up[i][j] += h
            down[i][j] -= h
            grad[i][j] = (loss(up) - loss(down)) / (2 * h)
    U_new = eta * U - beta * torch.tensor(grad, dtype=S.dtype)
    return (1 - alpha) * S + U_new, U_new


def momentum_by_differences_of_one_residual(S, U, k, v, beta, eta, alpha):  # entry by entry, a few writes each
    grad, h = torch.empty_like(S), 1e-6
    for i in range(S.shape[0]):
        for j in range(S.shape[1]):
            r = S[:, j] @ k - v[j]
            grad[i, j] = (0.5 * (r + h * k[i]) ** 2 - 0.5 * (r - h * k[i]) ** 2) / (2 * h)
    U_new = eta * U - beta * grad
    return (1 - alpha) * S + U_new, U_new


@pytest.mark.parametrize(
    "answer, says",
    [
        (_mlp_step_with(_central), r"displaced copy .*add moved a tensor of shape \(\d+,\) by 1\.0e-06"),
        (_mlp_step_with(_forward), r"displaced copy"),
        (_mlp_step_with(_entry_by_entry), r"displaced copy .*(single entries by the same step|by −s where)"),
        (_mlp_step_with(_relative_step_by_entry), r"displaced copy .*(single entries by the same step|by −s where)"),
        (_mlp_step_with(_in_place_steps), r"displaced copy .*add_ moved"),
        (_mlp_step_with(_weights_moved), r"displaced copy .*moved a tensor of shape \(\d+, \d+\)"),
        (_mlp_step_with(_points_built_apart), r"displaced copy .*an earlier result moved by 1\.0e-06"),
        (_mlp_step_with(_stacked_points), r"displaced copy"),
        (_mlp_step_with(_in_python_floats), r"handed \d+ numbers to Python or NumPy .*hidden layer has units"),
        (_mlp_step_with(_relative_by_a_tensor), r"displaced copy .*mul moved a tensor of shape \(\d+,\)"),
        (
            _mlp_step_with(_relative_by_a_computed_factor),
            r"displaced copy .*mul scaled .* the activation was evaluated",
        ),
        (_mlp_step_with(_relative_then_cloned), r"displaced copy .*scaled .* activation was evaluated"),
        (_mlp_step_with(_relative_points_stacked), r"displaced copy .*scaled .* activation was evaluated"),
        (_mlp_step_with(_relative_through_the_weights), r"displaced copy .*scaled .* activation was evaluated"),
        (_mlp_step_with(_relative_through_gelu_by_hand), r"displaced copy .*scaled .* activation was evaluated"),
    ],
    ids=[
        "central",
        "forward",
        "entry by entry",
        "relative step",
        "in place",
        "W1 moved",
        "fused",
        "stacked",
        "Python",
        "relative, a tensor factor",
        "relative, a computed factor",
        "computed factor, cloned",
        "computed factor, stacked",
        "computed factor, through W1",
        "computed factor, GELU by hand",
    ],  # fmt: skip
)
def test_finite_differences_of_gelu_alone_are_refused(answer, says):
    with pytest.raises(CheckFailed, match=rf"mlp_gradient_step: your function (evaluates at a )?{says}.*rules them"):
        checks.check_mlp_gradient_step(answer)


@pytest.mark.parametrize(
    "answer, says",
    [
        (momentum_by_python_differences, r"handed \d+ numbers to Python or NumPy .*the memory S has entries"),
        (momentum_by_differences_of_one_residual, r"evaluates at a displaced copy .*single entries"),
    ],
    ids=["Python floats", "one residual, entry by entry"],
)
def test_finite_differences_that_write_little_are_refused(answer, says):
    with pytest.raises(CheckFailed, match=rf"momentum_step: your function {says}.*rules them out"):
        checks.check_momentum_step(answer)


def _derived(a, W1, k):
    return torch.special.ndtr(a) + a * torch.exp(-0.5 * a**2) / math.sqrt(2 * math.pi)


def _derived_entry_by_entry(a, W1, k):
    out = torch.empty_like(a)
    for i in range(a.numel()):
        x = a[i]
        out[i] = torch.special.ndtr(x) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return out


def mlp_every_entry_by_loops(W1, W2, k, v, lr):  # GELU′(a) ≈ 1 for large a: one factor near 1 for many entries
    a = k @ W1
    h = _gelu(a)
    delta = h @ W2 - v
    gelu_prime, back = _derived(a, W1, k), W2 @ delta
    G1, G2 = torch.empty_like(W1), torch.empty_like(W2)
    for i in range(W1.shape[0]):
        for j in range(W1.shape[1]):
            G1[i, j] = k[i] * gelu_prime[j] * back[j]
    for i in range(W2.shape[0]):
        for j in range(W2.shape[1]):
            G2[i, j] = h[i] * delta[j]
    return W1 - lr * G1, W2 - lr * G2


def mlp_forward_twice(W1, W2, k, v, lr):  # the forward pass recomputed where it is needed
    delta = _gelu(k @ W1) @ W2 - v
    gelu_prime = _derived(k @ W1, W1, k)
    return W1 - lr * torch.outer(k, gelu_prime * (W2 @ delta)), W2 - lr * torch.outer(_gelu(k @ W1), delta)


def momentum_through_python(S, U, k, v, beta, eta, alpha):  # derived, the outer product in Python: D_k + D_v numbers
    error, key = (S.T @ k - v).tolist(), k.tolist()
    grad = torch.tensor([[ki * ej for ej in error] for ki in key], dtype=S.dtype)
    U_new = eta * U - beta * grad
    return (1 - alpha) * S + U_new, U_new


def _mlp_back(W1, W2, k, v):  # the pre-activation's gradient, GELU′(a) ⊙ W2 δ, and the second layer's step
    a = k @ W1
    h = _gelu(a)
    delta = h @ W2 - v
    return _derived(a, W1, k) * (W2 @ delta), h, delta


def mlp_w1_columns_in_place_into_a_clone(W1, W2, k, v, lr):  # review r35h: refused as "a displaced copy"
    back, h, delta = _mlp_back(W1, W2, k, v)
    W1_new = W1.clone()
    for j in range(W1.shape[1]):
        W1_new[:, j] -= lr * back[j] * k
    return W1_new, W2 - lr * torch.outer(h, delta)


def mlp_w1_columns_assigned_into_a_clone(W1, W2, k, v, lr):
    back, h, delta = _mlp_back(W1, W2, k, v)
    W1_new = W1.clone()
    for j in range(W1.shape[1]):
        W1_new[:, j] = W1[:, j] - lr * back[j] * k
    return W1_new, W2 - lr * torch.outer(h, delta)


def test_derived_steps_written_differently_pass():
    for check, answer in [
        (checks.check_mlp_gradient_step, mlp_w1_columns_in_place_into_a_clone),
        (checks.check_mlp_gradient_step, mlp_w1_columns_assigned_into_a_clone),
        (checks.check_mlp_gradient_step, _mlp_step_with(_derived)),
        (checks.check_mlp_gradient_step, _mlp_step_with(_derived_entry_by_entry)),
        (checks.check_mlp_gradient_step, mlp_every_entry_by_loops),
        (checks.check_mlp_gradient_step, mlp_forward_twice),
        (checks.check_momentum_step, momentum_through_python),
        (checks.check_momentum_step, momentum_loop),
    ]:
        assert_passes(check, answer)


def momentum_reads_every_factor(S, U, k, v, beta, eta, alpha):  # derived, but 2 D_k D_v numbers through .item()
    error, grad = S.T @ k - v, torch.empty_like(S)
    for i in range(S.shape[0]):
        for j in range(S.shape[1]):
            grad[i, j] = k[i].item() * error[j].item()
    U_new = eta * U - beta * grad
    return (1 - alpha) * S + U_new, U_new


def test_a_memory_s_worth_of_python_numbers_is_refused_even_for_a_derived_step():
    """What the rule costs, as the exercise states it: the check cannot see Python arithmetic, so it counts the
    numbers handed to Python; a derived step that reads as many as S has entries is refused with the finite
    differences in Python floats."""
    with pytest.raises(CheckFailed, match=r"handed 12 numbers to Python or NumPy \(the last with \.item\(\) or float"):
        checks.check_momentum_step(momentum_reads_every_factor)


# -- review r35d: finite differences at large steps, extrapolated, and read from a tensor's printed form ---------------


def momentum_by_large_central_differences(S, U, k, v, beta, eta, alpha):  # exact on a quadratic loss at any step
    grad, h = torch.empty_like(S), 1.0
    for j in range(S.shape[1]):
        column = S[:, j].clone()
        for i in range(S.shape[0]):  # the entry is moved up, down, and put back: x → x + h → x − h → x
            column[i] = column[i] + h
            up = 0.5 * (column @ k - v[j]) ** 2
            column[i] = column[i] - 2 * h
            down = 0.5 * (column @ k - v[j]) ** 2
            column[i] = column[i] + h
            grad[i, j] = (up - down) / (2 * h)
    U_new = eta * U - beta * grad
    return (1 - alpha) * S + U_new, U_new


def momentum_by_differences_of_printed_numbers(S, U, k, v, beta, eta, alpha):  # floats parsed out of repr(S)
    def numbers(t):
        torch.set_printoptions(precision=20, sci_mode=True)
        try:
            return [float(x) for x in re.findall(r"[-+]?\d\.\d+e[-+]\d+", repr(t))]
        finally:
            torch.set_printoptions(profile="default")

    flat, key, value, h = numbers(S), numbers(k), numbers(v), 1e-5
    d_k, d_v = S.shape

    def loss(M):
        return 0.5 * sum((sum(M[i * d_v + j] * key[i] for i in range(d_k)) - value[j]) ** 2 for j in range(d_v))

    grad = []
    for n in range(d_k * d_v):
        up, down = flat[:], flat[:]
        up[n] += h
        down[n] -= h
        grad.append((loss(up) - loss(down)) / (2 * h))
    U_new = eta * U - beta * torch.tensor(grad, dtype=S.dtype).reshape(d_k, d_v)
    return (1 - alpha) * S + U_new, U_new


def _richardson(a, W1, k, h0=0.8, levels=4):  # central differences at 0.8, 0.4, 0.2, 0.1, extrapolated
    rows = [(_gelu(a + h0 / 2**i) - _gelu(a - h0 / 2**i)) / (2 * h0 / 2**i) for i in range(levels)]
    for m in range(1, levels):
        rows = [(4**m * rows[i + 1] - rows[i]) / (4**m - 1) for i in range(len(rows) - 1)]
    return rows[0]


def _richardson_stacked(a, W1, k, h0=0.8, levels=4):  # every point in one operation: a + [h, −h, h/2, −h/2, ...]
    steps = torch.tensor([s * h0 / 2**i for i in range(levels) for s in (1, -1)], dtype=a.dtype)
    values = _gelu(a[None] + steps[:, None])
    rows = [(values[2 * i] - values[2 * i + 1]) / (2 * h0 / 2**i) for i in range(levels)]
    for m in range(1, levels):
        rows = [(4**m * rows[i + 1] - rows[i]) / (4**m - 1) for i in range(len(rows) - 1)]
    return rows[0]


@pytest.mark.parametrize(
    "check, answer, says",
    [
        (
            checks.check_momentum_step,
            momentum_by_large_central_differences,
            r"momentum_step: your function evaluates at a displaced copy .*by −s where it was moved by \+s before, "
            r"\|s\| = 1\.0e\+00",
        ),
        (
            checks.check_momentum_step,
            momentum_by_differences_of_printed_numbers,
            r"momentum_step: your function handed \d+ numbers to Python or NumPy \(the last with repr\(\) or print",
        ),
        (
            checks.check_mlp_gradient_step,
            _mlp_step_with(_richardson),
            r"mlp_gradient_step: your function evaluates at a displaced copy .*by −s where it was moved by \+s",
        ),
        (
            checks.check_mlp_gradient_step,
            _mlp_step_with(_richardson_stacked),
            r"mlp_gradient_step: your function evaluated the activation .* \d+ per unit \(a derived GELU′ needs",
        ),
    ],
    ids=["8.3 step 1, moved and restored", "8.3 floats from repr(S)", "8.4 Richardson", "8.4 Richardson, one op"],
)
def test_finite_differences_at_any_step_are_refused(check, answer, says):
    """Finite differences are refused by what they do, not by the size of their step: a value moved by +s and by −s
    (or moved and put back), the activation evaluated at several points per unit, numbers read off a printed tensor."""
    with pytest.raises(CheckFailed, match=rf"{says}.*rules (them )?out"):
        check(answer)


def momentum_with_constants_moved(S, U, k, v, beta, eta, alpha):  # derived; zeros and ones moved both ways
    grad = torch.zeros_like(S)
    grad += torch.outer(k, S.T @ k)
    grad -= torch.outer(k, v)
    ones = torch.ones_like(S)
    keep = ones - alpha * ones
    _ = ones + alpha * ones  # a constant moved both ways: not a weight of the memory
    U_new = eta * U - beta * grad
    return keep * S + U_new, U_new


def test_derived_steps_that_move_constants_both_ways_pass():
    assert_passes(checks.check_momentum_step, momentum_with_constants_moved)


# -- review r35h: the complex step, one column at a time, wrote few numbers and passed 8.3 -----------------------------


def momentum_by_complex_step(S, U, k, v, beta, eta, alpha):  # Im ℓ(x + ih) / h: exact to rounding, a numerical gradient
    grad, h, key = torch.empty_like(S), 1e-30, k.to(torch.complex128)
    for j in range(S.shape[1]):
        column = S[:, j].to(torch.complex128)
        for i in range(S.shape[0]):
            column[i] += 1j * h
            grad[i, j] = (0.5 * (column @ key - v[j]) ** 2).imag / h
            column[i] -= 1j * h
    U_new = eta * U - beta * grad
    return (1 - alpha) * S + U_new, U_new


def mlp_with_a_complex_tensor(W1, W2, k, v, lr):  # e^{−a²/2} through complex numbers: nothing here needs them, so
    a = k @ W1  # the check refuses any complex tensor (the complex step's sign), as 11.4's does
    h = _gelu(a)
    delta = h @ W2 - v
    density = torch.exp(-0.5 * a.to(torch.complex128) ** 2).real / math.sqrt(2 * math.pi)
    gelu_prime = torch.special.ndtr(a) + a * density
    return W1 - lr * torch.outer(k, gelu_prime * (W2 @ delta)), W2 - lr * torch.outer(h, delta)


@pytest.mark.parametrize(
    "check, answer",
    [
        (checks.check_momentum_step, momentum_by_complex_step),
        (checks.check_mlp_gradient_step, mlp_with_a_complex_tensor),
    ],
    ids=["8.3 column by column", "8.4 a complex tensor"],
)
def test_the_complex_step_is_refused(check, answer):
    with pytest.raises(
        CheckFailed, match=r"computes with complex numbers .*complex step evaluates the loss at x \+ ih"
    ):
        check(answer)


# -- review r35j: right answers that print what they compute, or use torch.distributions, pass --


def momentum_step_that_prints(S, U, k, v, beta, eta, alpha):  # debugging prints at torch's default digits
    gradient = torch.outer(k, S.T @ k - v)
    print(gradient)
    U_new = eta * U - beta * gradient
    return (1 - alpha) * S + U_new, U_new


def momentum_step_that_formats(S, U, k, v, beta, eta, alpha):  # an f-string prints at torch's default digits too
    gradient = torch.outer(k, S.T @ k - v)
    print(f"gradient: {gradient}")
    U_new = eta * U - beta * gradient
    return (1 - alpha) * S + U_new, U_new


def mlp_step_that_prints(W1, W2, k, v, lr):
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    print(a, delta)
    gelu_prime = torch.special.ndtr(a) + a * torch.exp(-0.5 * a**2) / math.sqrt(2 * math.pi)
    return W1 - lr * torch.outer(k, gelu_prime * (W2 @ delta)), W2 - lr * torch.outer(h, delta)


def mlp_step_by_the_normal_distribution(W1, W2, k, v, lr):  # Φ and φ from torch.distributions (it validates booleans)
    normal = torch.distributions.Normal(torch.zeros((), dtype=W1.dtype), torch.ones((), dtype=W1.dtype))
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    gelu_prime = normal.cdf(a) + a * normal.log_prob(a).exp()
    return W1 - lr * torch.outer(k, gelu_prime * (W2 @ delta)), W2 - lr * torch.outer(h, delta)


@pytest.mark.parametrize(
    "check,answer",
    [
        (checks.check_momentum_step, momentum_step_that_prints),
        (checks.check_momentum_step, momentum_step_that_formats),
        (checks.check_mlp_gradient_step, mlp_step_that_prints),
        (checks.check_mlp_gradient_step, mlp_step_by_the_normal_distribution),
    ],
    ids=[
        "8.3 prints its gradient",
        "8.3 prints its gradient in an f-string",
        "8.4 prints a and δ",
        "8.4 through torch.distributions.Normal",
    ],
)
def test_right_answers_that_print_or_validate_pass(check, answer, capsys):
    assert check(answer) is True
    assert "PASS" in capsys.readouterr().out
