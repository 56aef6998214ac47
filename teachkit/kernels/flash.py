r"""FlashAttention's forward pass in Triton: attention without the ``L x S`` score matrix.

One program owns a block of ``BLOCK_M`` query rows of one (batch, head). It loads its queries once
and walks over the keys and values in blocks of ``BLOCK_N``, keeping for every row the running
maximum ``m``, the running denominator ``l`` and an unnormalised output ``acc`` in float32: the
online softmax of notebooks 03-04 with a matrix product on each side
(:func:`teachkit.attention.attention_block_update` is the same step in torch). The scale is
folded into the exponent, ``qk * scale * log2(e)``, so every exponential is an ``exp2``.

With ``causal=True`` the key blocks fall into three kinds: blocks wholly below the diagonal are
processed without any mask, blocks that cross it with a mask, and blocks wholly above it are never
loaded (the loop stops before them). The log-sum-exp of each row, converted back to natural log,
is written beside the output: it is what merges partial results (ring attention, split-KV
decoding) and what the backward pass needs.

On Hopper (sm_90) the configurations marked ``tma`` fetch the query, key and value tiles through
tensor descriptors: the copy engine moves a whole tile per instruction and pads rows past the
end with zeros, so tails need no load masks (the score masks stay).

:func:`flash_attention` validates, picks a configuration by head dim, dtype, mask and GPU, and
launches. :func:`launch_configs` lists every configuration it may pick, for the compile check of
``python -m teachkit.kernels``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..device import INTERPRETED, ON_GPU, compute_capability
from ..validation import require_attention_inputs
from .targets import UNIT_HEAD_DIM_STRIDES, KernelConfig, gpu_class

__all__ = [
    "HEAD_DIMS",
    "FlashConfig",
    "flash_attention",
    "flash_config",
    "launch",
    "launch_configs",
]

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
HEAD_DIMS = (16, 32, 64, 128, 256)
"""Head dims the kernel takes (powers of two: ``tl.arange`` needs them)."""
_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_DEVICE_TYPE = "cuda" if ON_GPU else "cpu"
_MAX_GRID_Y = 65535
"""CUDA's limit on the second grid axis, which holds ``batch * heads``."""


# ---------------------------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------------------------
@triton.jit
def _attend_block(acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, b, h, start_n, offs_m, offs_n, S,
                  stride_kn, stride_vn, qk_scale,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                  DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr, BLOCK_N: tl.constexpr,
                  HEAD_DIM: tl.constexpr):
    """Fold the key/value block starting at ``start_n`` into ``(acc, l, m)`` (``m`` in log2
    units of the scaled scores). ``MASKED`` blocks mask keys past ``S`` and, if ``CAUSAL``,
    keys above the diagonal; the others are loaded and used whole. With ``USE_TMA``, ``K`` and
    ``V`` are tensor descriptors: the copy engine fetches the blocks (rows past ``S`` as zeros)."""
    cols = start_n + offs_n
    if USE_TMA:
        k = K.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = V.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
    elif MASKED:
        k = tl.load(k_ptrs + start_n * stride_kn, mask=cols[:, None] < S, other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vn, mask=cols[:, None] < S, other=0.0)
    else:
        k = tl.load(k_ptrs + start_n * stride_kn)
        v = tl.load(v_ptrs + start_n * stride_vn)
    v_dtype = v.dtype
    if DOT_FP32:  # the interpreter multiplies bfloat16 tiles wrongly: multiply in float32
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    if MASKED:
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: no NaN
        p = tl.exp2(qk - shift[:, None])
    else:
        # Every key is real: the row maximum is finite, and scale-then-subtract is one FMA.
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        shift = m_new
        p = tl.exp2(qk * qk_scale - shift[:, None])
    alpha = tl.exp2(m_i - shift)
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(v_dtype).to(v.dtype)  # p rounded to the inputs' dtype, as the tensor cores take it
    # The product accumulates into the rescaled acc: the tensor cores' accumulator, no extra add.
    acc = tl.dot(p, v, acc * alpha[:, None], input_precision=PRECISION)
    return acc, l_i, m_new


@triton.jit
def _flash_fwd_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    H, L, S, qk_scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, DOT_FP32: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    if CAUSAL:  # the last query blocks see the most keys: start them first (a shorter tail)
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    if USE_TMA:  # Q, K, V are (B, H, length, D) tensor descriptors
        b = bh // H
        h = bh % H
        q = Q.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        k_ptrs = K
        v_ptrs = V
    else:
        b = (bh // H).to(tl.int64)
        h = (bh % H).to(tl.int64)
        q_ptrs = (Q + b * stride_qb + h * stride_qh
                  + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
        k_ptrs = (K + b * stride_kb + h * stride_kh
                  + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)
        v_ptrs = (V + b * stride_vb + h * stride_vh
                  + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        q = tl.load(q_ptrs, mask=offs_m[:, None] < L, other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = qk_scale * LOG2E

    # Keys [0, full_end) need no mask: inside S and, if causal, below the diagonal of every
    # query row of this block (BLOCK_M is a multiple of BLOCK_N, so start_m is a block edge).
    # Keys [full_end, end) are masked; keys from `end` on are never loaded.
    s_full = (S // BLOCK_N) * BLOCK_N
    if CAUSAL:
        full_end = tl.minimum(start_m, s_full)
        end = tl.minimum(start_m + BLOCK_M, S)
    else:
        full_end = s_full
        end = S
    for start_n in range(0, full_end, BLOCK_N):
        acc, l_i, m_i = _attend_block(acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, b, h, start_n,
                                      offs_m, offs_n, S, stride_kn, stride_vn, qk_scale,
                                      False, CAUSAL, PRECISION, DOT_FP32, USE_TMA, BLOCK_N,
                                      HEAD_DIM)
    for start_n in range(full_end, end, BLOCK_N):
        acc, l_i, m_i = _attend_block(acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, b, h, start_n,
                                      offs_m, offs_n, S, stride_kn, stride_vn, qk_scale,
                                      True, CAUSAL, PRECISION, DOT_FP32, USE_TMA, BLOCK_N,
                                      HEAD_DIM)

    # Every real row saw at least key 0, so l >= 1; padding rows are not stored.
    acc = acc * (1.0 / l_i)[:, None]
    lse = (m_i + tl.log2(l_i)) * LN2  # log2 units of the scaled scores back to natural log
    row_ok = offs_m < L
    tl.store(LSE + bh.to(tl.int64) * L + offs_m, lse, mask=row_ok)
    o_ptrs = (O + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
              + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None])


# ---------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------
class FlashConfig(NamedTuple):
    """One launch of the kernel: tile sizes, the compiler's warps and pipeline depth, and
    whether keys and values come through the Hopper copy engine (TMA tensor descriptors)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False


_INTERPRETER_CONFIG = FlashConfig(16, 16, 4, 1)
"""Under the interpreter: small tiles, so tests on tiny shapes stay fast."""

GPU_CLASSES = (75, 80, 89, 90)
"""Classes the configurations are chosen for: sm_75 (T4, 64 KB of shared memory a block), sm_80
(A100: 163 KB), sm_89 (L4, RTX: about 99 KB) and sm_90 (H100, H200: 227 KB and TMA)."""
_CHECKED_ON = {75: (75,), 80: (80,), 89: (89,), 90: (90,)}
"""The capabilities of the compile check that stand for each class."""

# (gpu class, head dim, bytes per element, causal) -> config; fp16 and bf16 share their tiles.
# Class 80/90's half-precision entries were measured on an H100 (fp16, B=4, H=32, L=1k-16k; the
# sweep of teachkit.kernels.flash_tuning): 8 warps on 128 x 64 tiles win for D = 64 and 128;
# on sm_90, 128 x 128 tiles fed by TMA win for D = 128 (506 against 495 TFLOP/s at L = 4096,
# 543 against 490 at 16384).
_GPU_TABLE: dict[tuple[int, int, int, bool], FlashConfig] = {}
for _cls in GPU_CLASSES:
    for _d in HEAD_DIMS:
        for _size in (2, 4):
            for _causal in (False, True):
                if _size == 4:  # float32: twice the bytes per tile, ieee dot (no tensor cores)
                    _cfg = FlashConfig(64, 32, 4, 2) if _d <= 64 else FlashConfig(32, 32, 4, 2)
                    if _d == 256:
                        _cfg = FlashConfig(16, 16, 4, 2)
                elif _d <= 64:
                    _cfg = {75: FlashConfig(128, 64, 4, 2), 80: FlashConfig(128, 64, 8, 3),
                            89: FlashConfig(128, 64, 4, 3), 90: FlashConfig(128, 64, 8, 3)}[_cls]
                elif _d == 128:  # 4 stages: 511 TFLOP/s without a mask, 3 stages: 449 causal
                    _cfg = {75: FlashConfig(64, 64, 4, 2),
                            80: FlashConfig(128, 64, 8, 3 if _causal else 4),
                            89: FlashConfig(128, 64, 8, 2),
                            90: FlashConfig(128, 128, 8, 3, tma=True)}[_cls]
                else:  # 256
                    _cfg = FlashConfig(64, 32, 8, 2) if _cls != 75 else FlashConfig(32, 32, 4, 2)
                _GPU_TABLE[(_cls, _d, _size, _causal)] = _cfg


def flash_config(head_dim: int, dtype: torch.dtype,
                 capability: tuple[int, int] | None = None, causal: bool = False) -> FlashConfig:
    """The launch configuration :func:`flash_attention` uses.

    Parameters
    ----------
    head_dim : int
        One of :data:`HEAD_DIMS`.
    dtype : torch.dtype
        float16, bfloat16 or float32.
    capability : tuple of int, optional
        ``(major, minor)`` of the GPU; ``None`` means the interpreter's small fixed config.
    causal : bool
        Whether the launch is causal (the measured best pipeline depth differs).

    Returns
    -------
    FlashConfig
        ``(BLOCK_M, BLOCK_N, num_warps, num_stages)``; ``BLOCK_M`` is a multiple of ``BLOCK_N``.
    """
    if capability is None:
        return _INTERPRETER_CONFIG
    size = 4 if dtype == torch.float32 else 2
    return _GPU_TABLE[(gpu_class(capability), head_dim, size, bool(causal))]


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def _validate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if isinstance(t, torch.Tensor) and t.dim() != 4:
            raise ValueError(
                f"{name} must have 4 dimensions (batch, heads, length, head_dim), got shape "
                f"{tuple(t.shape)}; add the missing axes, e.g. {name}[None, None] for one head"
            )
    require_attention_inputs(q, k, v)
    if q.dtype not in _KERNEL_DTYPES:
        raise TypeError(
            f"flash_attention takes float16, bfloat16 or float32, got {q.dtype}; use "
            "teachkit.attention.naive_attention for float64, or convert with q.half()"
        )
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"v must have the head dim of q and k ({q.shape[-1]}), got {v.shape[-1]}; this "
            "kernel needs one head dim for all three"
        )
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(
            f"head dim {q.shape[-1]} is not supported; pass one of {HEAD_DIMS} (pad the head "
            "dim with zeros up to the next one if needed)"
        )
    if q.device.type != _DEVICE_TYPE:
        raise ValueError(
            f"q, k and v are on {q.device} but the kernel runs on the GPU; move them first: "
            "q.cuda()" if ON_GPU else
            f"q, k and v are on {q.device}; without a GPU, the kernel takes CPU tensors"
        )
    if q.shape[0] * q.shape[1] > _MAX_GRID_Y:
        raise ValueError(
            f"batch * heads must be at most {_MAX_GRID_Y}, got {q.shape[0] * q.shape[1]}; "
            "split the batch into several calls"
        )


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    scale: float | None = None, return_lse: bool = False, *,
    config: FlashConfig | None = None, autotune: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Attention :math:`\mathrm{softmax}(q k^T \cdot scale)\, v` by FlashAttention's forward pass.

    Parameters
    ----------
    q : torch.Tensor
        ``(B, H, L, D)`` queries, float16, bfloat16 or float32, any strides; on the GPU when
        there is one (CPU tensors under Triton's interpreter).
    k, v : torch.Tensor
        ``(B, H, S, D)`` keys and values, q's dtype and device. ``D`` is one of
        :data:`HEAD_DIMS`; ``L`` and ``S`` are any lengths.
    causal : bool
        As ``is_causal=True`` of ``scaled_dot_product_attention``: query ``i`` sees keys
        ``j <= i`` (top-left aligned, also when ``L != S``).
    scale : float, optional
        Multiplies the scores; defaults to ``1/sqrt(D)``.
    return_lse : bool
        Also return the log-sum-exp of every row's scaled scores.
    config : FlashConfig, optional
        Launch with these tiles, warps and stages instead of the table's choice (for tuning
        sweeps); ``block_m`` must be a multiple of ``block_n``, both powers of two >= 16.
    autotune : bool
        Time the candidates of :func:`teachkit.kernels.flash_tuning.candidate_configs` on this
        problem the first time its kind is seen and keep the fastest
        (:func:`~teachkit.kernels.flash_tuning.tuned_config`). Under the interpreter there is
        one small candidate, so this changes nothing there.

    Returns
    -------
    out : torch.Tensor
        ``(B, H, L, D)`` in q's dtype; zeros when ``S = 0``, as ``scaled_dot_product_attention``.
    lse : torch.Tensor
        Only with ``return_lse``: ``(B, H, L)`` float32, natural log; ``-inf`` when ``S = 0``.

    Notes
    -----
    Softmax statistics and the output accumulate in float32. float32 inputs multiply with
    ``input_precision="ieee"`` (true float32, no tf32), so they agree with a float64 reference
    to about 1e-5; float16/bfloat16 use the tensor cores.

    With ``causal=True``, keys above the diagonal are never loaded, so a NaN in ``v`` at key
    ``j`` reaches only the rows that see key ``j``; ``scaled_dot_product_attention``'s math
    backend multiplies the masked weights (zeros) by it and spreads NaN to every row.

    Examples
    --------
    >>> import torch, teachkit
    >>> from teachkit.kernels import flash_attention
    >>> q, k, v = (torch.randn(1, 2, 20, 16, device=teachkit.DEVICE) for _ in range(3))
    >>> out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> teachkit.relative_error(out, ref) < 1e-5
    True
    """
    _validate(q, k, v)
    if config is not None:
        _check_config(config)
    if isinstance(scale, bool) or not (scale is None or isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    B, H, L, D = q.shape
    S = k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if S == 0:  # no keys: zeros and -inf, as scaled_dot_product_attention gives
        out = torch.zeros((B, H, L, D), dtype=q.dtype, device=q.device)
        lse = torch.full((B, H, L), float("-inf"), dtype=torch.float32, device=q.device)
        return (out, lse) if return_lse else out
    out = torch.empty((B, H, L, D), dtype=q.dtype, device=q.device)  # every row is written
    lse = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    if out.numel() > 0:
        if config is None and autotune:
            from .flash_tuning import tuned_config

            config = tuned_config(q, k, v, bool(causal), scale)
        if config is None:
            config = flash_config(D, q.dtype, None if INTERPRETED else compute_capability(q.device),
                                  bool(causal))
        launch(q, k, v, out, lse, bool(causal), scale, config)
    return (out, lse) if return_lse else out


def _check_config(config: FlashConfig) -> None:
    if not isinstance(config, FlashConfig):
        raise TypeError(f"config must be a FlashConfig, got {type(config).__name__}")
    bm, bn = config.block_m, config.block_n
    if not all(b >= 16 and b & (b - 1) == 0 for b in (bm, bn)) or bm % bn:
        raise ValueError(
            f"config needs block_m and block_n powers of two >= 16 with block_m a multiple of "
            f"block_n, got block_m={bm}, block_n={bn}; e.g. FlashConfig(128, 64, 8, 3)"
        )


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
           lse: torch.Tensor, causal: bool, scale: float, config: FlashConfig) -> None:
    """Launch the kernel with ``config`` on validated inputs, writing ``out`` and ``lse``.

    No checks: :func:`flash_attention` is the entry point; tuning sweeps call this directly.
    """
    B, H, L, D = q.shape
    grid = (triton.cdiv(L, config.block_m), B * H)
    use_tma = config.tma and _tma_ok(q, k, v)
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        def desc(t: torch.Tensor, rows: int) -> TensorDescriptor:
            return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, D])

        Q, K, V = desc(q, config.block_m), desc(k, config.block_n), desc(v, config.block_n)
    else:
        Q, K, V = q, k, v
    _flash_fwd_kernel[grid](
        Q, K, V, out, lse,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        H, L, k.shape[2], scale,
        CAUSAL=causal, HEAD_DIM=D, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        DOT_FP32=INTERPRETED and q.dtype == torch.bfloat16, USE_TMA=use_tma,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )


def _tma_ok(*tensors: torch.Tensor) -> bool:
    """Whether the copy engine can fetch these tensors' tiles: a Hopper GPU (or the
    interpreter), half precision, unit last stride and 16-byte aligned base and strides."""
    if not INTERPRETED and compute_capability(tensors[0].device)[0] != 9:
        return False
    for t in tensors:
        size = t.element_size()
        if (size != 2 or t.stride(-1) != 1 or t.data_ptr() % 16
                or any(st * size % 16 for st in t.stride()[:-1])):
            return False
    return True


def attention_signature(scale: str, constexprs: tuple[str, ...]) -> dict:
    """The compile-check signature of a FlashAttention kernel of this shape: bf16 ``Q, K, V, O``,
    an fp32 ``LSE``, the strides of the four (head-dim strides the constant 1, as a launch
    specialises them), ``H, L, S``, the float ``scale`` argument and the ``constexprs``."""
    sig = {name: "*bf16" for name in ("Q", "K", "V", "O")}
    sig["LSE"] = "*fp32"
    for t in "qkvo":
        for axis in "bhmd" if t in "qo" else "bhnd":
            sig[f"stride_{t}{axis}"] = "constexpr" if axis == "d" else "i32"
    sig.update({"H": "i32", "L": "i32", "S": "i32", scale: "fp32"})
    sig.update(dict.fromkeys(constexprs, "constexpr"))
    return sig


def launch_configs() -> list[KernelConfig]:
    """Every configuration :func:`flash_attention` may launch on a GPU, for compile checks.

    One per (configuration, head dim, element size, causal), each checked only on the
    capabilities whose class picks it (a T4 never launches the tiles chosen for an H100);
    float16 and bfloat16 tiles take the same shared memory, so bfloat16 stands for both.
    """
    sig = attention_signature("qk_scale", ("CAUSAL", "HEAD_DIM", "BLOCK_M", "BLOCK_N",
                                           "PRECISION", "DOT_FP32", "USE_TMA"))
    classes: dict[tuple[int, int, bool, FlashConfig], list[int]] = {}
    for (cls, d, size, causal), cfg in _GPU_TABLE.items():
        classes.setdefault((d, size, causal, cfg), []).append(cls)
    configs = []
    for (d, size, causal, cfg), used_by in classes.items():
        ty = "fp32" if size == 4 else "bf16"
        signature = {**sig, **{n: f"*{ty}" for n in ("Q", "K", "V", "O")}}
        if cfg.tma:
            rows = {"Q": cfg.block_m, "K": cfg.block_n, "V": cfg.block_n}
            signature.update({n: f"tensordesc<{ty}[1, 1, {r}, {d}]>" for n, r in rows.items()})
        gpus = "/".join(f"sm_{c}" for c in used_by)
        caps = tuple(cap for c in used_by for cap in _CHECKED_ON[c])
        configs.append(KernelConfig(
            f"flash {ty} D={d} causal={causal} BLOCK_M={cfg.block_m} BLOCK_N={cfg.block_n} "
            f"warps={cfg.num_warps} stages={cfg.num_stages}{' TMA' if cfg.tma else ''} "
            f"(for {gpus}-class GPUs)",
            _flash_fwd_kernel, signature,
            {"CAUSAL": causal, "HEAD_DIM": d, "BLOCK_M": cfg.block_m,
             "BLOCK_N": cfg.block_n, "PRECISION": "ieee" if size == 4 else "tf32",
             "DOT_FP32": False, "USE_TMA": cfg.tma, **UNIT_HEAD_DIM_STRIDES},
            cfg.num_warps, cfg.num_stages, caps))
    return configs
