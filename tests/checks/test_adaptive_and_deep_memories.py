"""Chapter 08's checks accept a correct answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import math

import pytest
import torch
from torch.func import grad

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
    assert capsys.readouterr().out.startswith("PASS")


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
