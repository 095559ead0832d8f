"""The matrix engine's MATMUL and GMATMUL: semantics, memory extents and the datasheet's cycle formulas.

Matrix-engine cycles are the SCALE-Sim closed forms, built from the per-fold cost of the dataflow
(`ARRAY_MODELS` also has a fold-by-fold variant); the compiler's tilers use the same functions. GMATMUL
(a grouped product) runs its groups side by side in column blocks of the array: its folds are those of
one block, each as long as a MATMUL's.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from glowsdk import numerics

from ..behaviour import Extent, ProgramError, Registers, State, Timing, Write, strided, write_to

if TYPE_CHECKING:
    from ..config import ArchConfig
    from ..encoding import Instr

EXACT_FLOAT32_K = 1024
"""Up to this K an int8 dot product stays within 2^24 (K * 128 * 128), exact in float32 BLAS."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _im2col(state: State, i: Instr, r: Registers, inp: int | None = None) -> np.ndarray:
    """The P x K input matrix read through the convolution window (the ISA's implicit im2col), from `inp`
    (the instruction's own by default)."""
    inp = i.inp if inp is None else inp
    channels, kw, out_w = r["channels"], r["kw"], r["out_w"]
    kh = i.k // (kw * channels)
    row, pixel = r["row_pitch"], r["pixel_pitch"]
    window = (kh, kw, channels), (r["dil_h"] * row, r["dil_w"] * pixel, 1)
    full, rest = divmod(i.rows, out_w)
    parts = []
    if full:
        parts.append(strided(state.spad, inp, (full, out_w, *window[0]),
                             (r["stride_h"] * row, r["stride_w"] * pixel, *window[1])))
    if rest:
        parts.append(strided(state.spad, inp + full * r["stride_h"] * row, (1, rest, *window[0]),
                             (r["stride_h"] * row, r["stride_w"] * pixel, *window[1])))
    return np.concatenate([p.reshape(-1, i.k) for p in parts])


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b of int8 operands as int64, exactly: int8 products summed over K <= 8191 stay below 2^27, exact in
    float64 (and in float32 up to K = 1024)."""
    exact = np.float32 if a.shape[-1] <= EXACT_FLOAT32_K else np.float64
    return (a.astype(exact) @ b.astype(exact)).astype(np.int64)


def matmul(state: State, i: Instr, r: Registers) -> list[Write]:
    spad = state.spad
    a = _im2col(state, i, r) if r["im2col"] else spad[i.inp:i.inp + i.rows * i.k].reshape(i.rows, i.k)
    total = _product(a, spad[i.wgt:i.wgt + i.k * i.n].reshape(i.k, i.n))
    if i.acc_mode:
        total += state.acc[i.acc:i.acc + i.rows * i.n].reshape(i.rows, i.n)
    return write_to(state.acc, i.acc, numerics.wrap32(total))


def grouped_matmul(state: State, i: Instr, r: Registers) -> list[Write]:
    """GMATMUL: `groups` products of rows x k by k x n, group q's input `channels` (im2col) or k bytes (dense)
    after group q - 1's, its sums in result columns j*groups + q (interleave) or q*n + j."""
    spad, g = state.spad, i.groups
    if r["im2col"]:
        inputs = [_im2col(state, i, r, i.inp + q * r["channels"]) for q in range(g)]
    else:
        whole = spad[i.inp:i.inp + i.rows * g * i.k].reshape(i.rows, g, i.k)
        inputs = [whole[:, q] for q in range(g)]
    weights = spad[i.wgt:i.wgt + g * i.k * i.n].reshape(g, i.k, i.n)
    total = np.stack([_product(inputs[q], weights[q]) for q in range(g)], axis=1)  # rows x groups x n
    total = (total.transpose(0, 2, 1) if i.interleave else total).reshape(i.rows, g * i.n)
    if i.acc_mode:
        total += state.acc[i.acc:i.acc + i.rows * g * i.n].reshape(i.rows, g * i.n)
    return write_to(state.acc, i.acc, numerics.wrap32(total))


def _input_extent(i: Instr, r: Registers, per_pixel: int, extra: int) -> Extent:
    """The scratchpad bytes a product's input reads: `per_pixel` bytes a row when dense, else the im2col window's
    reach, `extra` bytes further (the groups after the first)."""
    if not r["im2col"]:
        return Extent("spad", i.inp, i.inp + i.rows * per_pixel, False)
    window = r["kw"] * r["channels"]
    if i.k % window:
        raise ProgramError(f"k = {i.k} is not a multiple of kw * channels = {window} (im2col)")
    kh = i.k // window
    # The farthest output pixel is the last one, or the end of the row before it.
    last_row, last_col = divmod(i.rows - 1, r["out_w"])
    candidates = [(last_row, last_col)] + ([(last_row - 1, r["out_w"] - 1)] if last_row else [])
    pixel = max(oy * r["stride_h"] * r["row_pitch"] + ox * r["stride_w"] * r["pixel_pitch"] for oy, ox in candidates)
    tap = (kh - 1) * r["dil_h"] * r["row_pitch"] + (r["kw"] - 1) * r["dil_w"] * r["pixel_pitch"] + r["channels"]
    return Extent("spad", i.inp, i.inp + pixel + tap + extra, False)


def _result_extents(i: Instr, columns: int) -> list[Extent]:
    out = [Extent("acc", i.acc, i.acc + i.rows * columns, True)]
    if i.acc_mode:
        out.append(Extent("acc", i.acc, i.acc + i.rows * columns, False))
    return out


def grouped_matmul_extents(i: Instr, r: Registers) -> list[Extent]:
    g = i.groups
    inp = _input_extent(i, r, g * i.k, (g - 1) * r["channels"] if r["im2col"] else 0)
    return [inp, Extent("spad", i.wgt, i.wgt + g * i.k * i.n, False), *_result_extents(i, g * i.n)]


def matmul_extents(i: Instr, r: Registers) -> list[Extent]:
    return [_input_extent(i, r, i.k, 0), Extent("spad", i.wgt, i.wgt + i.k * i.n, False), *_result_extents(i, i.n)]


def matmul_folds(rows: int, k: int, n: int, dataflow: str, config: ArchConfig) -> int:
    """Array passes of one MATMUL: K x N folds weight-stationary, P x N folds output-stationary."""
    r, c = config.array_rows, config.array_cols
    spread = _ceil(k, r) if dataflow == "ws" else _ceil(rows, r)
    return spread * _ceil(n, c)


def matmul_cycles(rows: int, k: int, n: int, dataflow: str, config: ArchConfig) -> int:
    """Stall-free MATMUL cycles (SCALE-Sim): folds x per-fold cost, minus the one overlapped cycle.

    Weight-stationary, a fold preloads R rows of weights, skews P input rows in over R + C - 2 cycles
    of fill and drain: 2R + C + P - 2. Output-stationary, a fold streams K steps of both operands
    through the R + C - 2 cycles of skew: R + C + K - 2.
    """
    r, c = config.array_rows, config.array_cols
    per_fold = 2 * r + c + rows - 2 if dataflow == "ws" else r + c + k - 2
    return matmul_folds(rows, k, n, dataflow, config) * per_fold - 1


def matmul_cycles_by_fold(rows: int, k: int, n: int, dataflow: str, config: ArchConfig) -> int:
    """Stall-free MATMUL cycles fold by fold, each fold filling and draining over only the PEs it uses.

    A weight-stationary fold with kr weight rows and nc columns preloads kr rows, streams the P
    inputs skewed over its kr rows and nc columns, and its sums still cross all R rows to the
    array's edge: kr + P + R + nc - 2. An output-stationary fold of pr x nc results streams K steps
    skewed over its pr rows and nc columns: K + pr + nc - 2. Summed over the folds (the kr add up
    to K, the nc to N, the pr to P), less the one overlapped cycle. When every fold is full (R
    divides K, or P, and C divides N) this is `matmul_cycles`; otherwise it is smaller.
    """
    r, c = config.array_rows, config.array_cols
    n_folds = _ceil(n, c)
    if dataflow == "ws":
        k_folds = _ceil(k, r)
        return n_folds * k + k_folds * n + k_folds * n_folds * (rows + r - 2) - 1
    p_folds = _ceil(rows, r)
    return n_folds * rows + p_folds * n + p_folds * n_folds * (k - 2) - 1


ARRAY_MODELS = {"closed": matmul_cycles, "folds": matmul_cycles_by_fold}
"""The matrix engine's timing models: every fold as a full one (the datasheet's closed form, SCALE-Sim's), or
fold by fold (partial folds fill and drain faster)."""


def _matmul_cycles(i: Instr, r: Registers, config: ArchConfig, array_model: str) -> int:
    """A MATMUL's cycles; a dataflow the array does not have is a static fault (a ProgramError)."""
    if r["dataflow"] not in config.dataflows:
        raise ProgramError(f"MATMUL in the {r['dataflow']} dataflow, but the array of architecture '{config.name}' "
                           f"is {config.dataflow}-only")
    return ARRAY_MODELS[array_model](i.rows, i.k, i.n, r["dataflow"], config)


MATMUL_TIMING = Timing(cycles=_matmul_cycles, macs=lambda i: i.rows * i.k * i.n)


def block_array(groups: int, config: ArchConfig) -> ArchConfig:
    """One of a GMATMUL's column blocks as an array of its own: R rows, C div groups columns (0 when the array has
    fewer columns than groups), its own input rows entering at its first column."""
    return replace(config, array_cols=config.array_cols // groups)


def grouped_matmul_cycles(rows: int, k: int, n: int, groups: int, dataflow: str, config: ArchConfig,
                          array_model: str = "closed") -> int:
    """Stall-free GMATMUL cycles: the blocks run side by side, each a MATMUL of rows x k by k x n on its own
    R x (C div groups) array (its folds, each filling and draining across its own columns only)."""
    return ARRAY_MODELS[array_model](rows, k, n, dataflow, block_array(groups, config))


def _grouped_cycles(i: Instr, r: Registers, config: ArchConfig, array_model: str) -> int:
    """A GMATMUL's cycles; more groups than array columns (an empty block) is a static fault."""
    if i.groups > config.array_cols:
        raise ProgramError(f"GMATMUL of {i.groups} groups, but the array of architecture '{config.name}' has "
                           f"{config.array_cols} columns")
    if r["dataflow"] not in config.dataflows:
        raise ProgramError(f"GMATMUL in the {r['dataflow']} dataflow, but the array of architecture "
                           f"'{config.name}' is {config.dataflow}-only")
    return grouped_matmul_cycles(i.rows, i.k, i.n, i.groups, r["dataflow"], config, array_model)


GMATMUL_TIMING = Timing(cycles=_grouped_cycles, macs=lambda i: i.groups * i.rows * i.k * i.n)
