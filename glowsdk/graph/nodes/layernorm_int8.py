"""The integer arithmetic of an int8 LayerNormalization (quant.IntegerLayerNorm): the one definition every target
shares (vendor_guide/quantization.md, "Integer LayerNormalization").

Per group x_1..x_D of int8 codes (the normalised trailing dims, flattened; the input's zero point cancels):

    mu  = round(sum x_i / D)                                   mean, to the nearest code
    d_i = x_i - mu                                             |d_i| <= 255
    W   = round(sum d_i^2 * 2^VAR_BITS / D)                    variance with VAR_BITS fraction bits, < 2^31
    n   = max(sat32(W + E), 1)                                 E = round(epsilon / s_x^2 * 2^VAR_BITS)
    r   = ROOT_START, then NEWTON_STEPS times: r = min(r, (r + round(n / r)) >> 1)     r ~ sqrt(n)
    q_i = sat32(round(d_i * 2^(VAR_BITS / 2 + NORM_BITS) / r))   the normalised value, NORM_BITS fraction bits
    t_i = sat32(sat32(q_i * Gamma_i) + Beta_i)                 Gamma_i = round(gamma_i * 2^G / s_y),
                                                               Beta_i = round(beta_i * 2^(NORM_BITS + G) / s_y)
    y_i = sat8(round(t_i / 2^(NORM_BITS + G)) + z_y)

Every round is to the nearest integer, ties to even (VDIV's and REQUANT's rule), `>>` floors. Newton's iteration
with `min` never rises, and r >= 1 for n >= 1, so no division by zero; from ROOT_START (above sqrt(2^31)) each
step at least halves the gap until r is within one of sqrt(n): 20 steps reach it for every n < 2^31. G is chosen
per layer (`layernorm_params`) so that |q_i * Gamma_i| < 2^30 for |normalised| <= sqrt(D): nothing saturates.
The reference evaluator's kernel and the NPU's layer (backends/npu/layernorm.py) compute exactly this.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import numerics

VAR_BITS = 14
"""Fraction bits of the variance: 255^2 * 2^14 < 2^31, so W fits int32 whatever D."""
NORM_BITS = 12
"""Fraction bits of the normalised value q."""
ROOT_START = 1 << 16
NEWTON_STEPS = 20
MAX_GAMMA_BITS = 18
INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class LayerNormParams:
    gamma: np.ndarray
    """Gamma_i, int32 per normalised element"""
    beta: np.ndarray
    """Beta_i, int32 per normalised element"""
    epsilon: int
    """E"""
    shift: int
    """NORM_BITS + G: the result is t / 2^shift"""


def _int32(values: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(values), -INT32_MAX - 1, INT32_MAX).astype(np.int32)


def layernorm_params(gamma: np.ndarray, beta: np.ndarray, epsilon: float, x_scale: float,
                     y_scale: float) -> LayerNormParams:
    """The integer constants of a LayerNorm from its float scale and bias and the int8 types around it."""
    gamma, beta = np.asarray(gamma, np.float64).reshape(-1), np.asarray(beta, np.float64).reshape(-1)
    reach = float(np.abs(gamma).max(initial=0.0)) / y_scale * math.sqrt(gamma.size) * 2 ** NORM_BITS
    bits = int(np.clip(30 - math.ceil(math.log2(reach + 1)), 0, MAX_GAMMA_BITS))
    shift = NORM_BITS + bits
    code = min(round(epsilon / (x_scale * x_scale) * 2 ** VAR_BITS), INT32_MAX)
    return LayerNormParams(_int32(gamma * 2 ** bits / y_scale), _int32(beta * 2 ** shift / y_scale), int(code),
                           shift)


def integer_root(n: np.ndarray) -> np.ndarray:
    """r ~ sqrt(n) for int32 n >= 1 by NEWTON_STEPS min-clamped Newton steps (the NPU runs the same ones)."""
    r = np.full(n.shape, ROOT_START, np.int64)
    for _ in range(NEWTON_STEPS):
        r = np.minimum(r, (r + numerics.divide_rounded(n, r)) >> 1)
    return r


def integer_layernorm(x: np.ndarray, length: int, gamma: np.ndarray, beta: np.ndarray, epsilon: int, shift: int,
                      zero: int) -> np.ndarray:
    """The int8 result for int8 codes `x` normalised over groups of its last `length` elements."""
    groups = x.astype(np.int64).reshape(-1, length)
    mu = numerics.divide_rounded(groups.sum(axis=1, keepdims=True), np.int64(length))
    d = groups - mu
    w = numerics.saturate(numerics.divide_rounded((d * d).sum(axis=1, keepdims=True), np.int64(length), VAR_BITS),
                          "acc").astype(np.int64)
    n = np.maximum(numerics.saturate(w + epsilon, "acc").astype(np.int64), 1)
    r = integer_root(n)
    q = numerics.saturate(numerics.divide_rounded(d, r, VAR_BITS // 2 + NORM_BITS), "acc").astype(np.int64)
    t = numerics.saturate(numerics.saturate(q * gamma.astype(np.int64), "acc").astype(np.int64)
                          + beta.astype(np.int64), "acc").astype(np.int64)
    y = numerics.round_shift(t, shift) + zero
    return np.clip(y, -128, 127).astype(np.int8).reshape(x.shape)


def statistics_unused(node) -> bool:
    """Whether nothing reads a LayerNorm's mean and inv_std_dev results (only then has it an integer form)."""
    return not any(v.node is node and v.index > 0 for user in node.users for v in user.present_inputs())
