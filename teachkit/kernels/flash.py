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

On Hopper, :func:`flash_attention` sends the inputs the Gluon kernel of
:mod:`teachkit.kernels.flash_hopper` takes, at the head dims where it was measured faster, to that
kernel instead (:func:`~teachkit.kernels.flash_hopper.hopper_preferred`).

:func:`flash_attention` validates, picks a configuration by head dim, dtype, mask and GPU
(:func:`flash_config`, a table measured on the GPUs), and launches. The configuration can also be
chosen by measurement on the GPU at hand: :func:`candidate_configs` lists the tiles worth timing,
:func:`sweep` times them on one problem, and ``flash_attention(..., autotune=True)`` does so once
per kind of problem and remembers the fastest (:data:`TUNED`). The compile check of
``python -m teachkit.kernels`` (:mod:`teachkit.kernels.compile_check`) proves that every
configuration of the table fits the shared memory of the GPUs learners use.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from ..device import (
    INTERPRETED,
    ON_GPU,
    compute_capability,
    current_gpu,
    multiprocessors,
    on_other_gpu,
)
from ..gpus import SHARED_MEMORY_LIMIT, gpu_class
from ..validation import require_bool, resolve_scale
from .attention_inputs import HEAD_DIMS, check_inputs
from .flash_backward import BackwardConfig, flash_backward
from .grid_math import cdiv
from .launch_cache import (
    LaunchReplay,
    cached_launch,
    keep,
    launch_replay,
    launch_settings,
    replay_table,
    tensor_key,
)
from .scratch import contiguous_like, stream_scratch

try:  # Gluon is experimental: a Triton whose Gluon differs keeps flash_attention on this kernel
    from .flash_hopper import (
        hopper_descriptors,
        hopper_form,
        hopper_launch_arguments,
        hopper_preferred,
    )
except (ImportError, AttributeError):  # pragma: no cover - Triton 3.6 to 3.9 have what it needs
    hopper_descriptors = hopper_form = hopper_launch_arguments = hopper_preferred = None

__all__ = [
    "FLASH_REPLAYS",
    "HEAD_DIMS",
    "LN2",
    "LOG2E",
    "TUNED",
    "FlashAttentionFunction",
    "FlashConfig",
    "FlashReplay",
    "attend_key_block",
    "candidate_configs",
    "flash_attention",
    "flash_config",
    "flash_fwd_kernel",
    "kernel_operands",
    "launch",
    "launch_arguments",
    "replay_key",
    "sweep",
    "table_config",
    "tuned_config",
]

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
LOWEST = tl.constexpr(-3.4028234663852886e38)
"""The lowest finite float32, where each row's running maximum starts (see
:func:`flash_fwd_kernel`)."""


# ---------------------------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------------------------
@triton.jit
def attend_key_block(acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, b, hk, start_n, offs_m, offs_n, S,
                     stride_kn, stride_vn, qk_scale,
                     MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                     DOT_FP32: tl.constexpr, USE_TMA: tl.constexpr, BLOCK_N: tl.constexpr,
                     HEAD_DIM: tl.constexpr):
    """Fold the key/value block starting at ``start_n`` into ``(acc, l, m)`` (``m`` in log2
    units of the scaled scores). ``MASKED`` blocks mask keys past ``S`` and, if ``CAUSAL``,
    keys above the diagonal; the others are loaded and used whole. With ``USE_TMA``, ``K`` and
    ``V`` are tensor descriptors: the copy engine fetches the blocks (rows past ``S`` as zeros)
    of batch ``b``, key head ``hk``.

    Shapes: ``q`` and ``acc`` ``(BLOCK_M, HEAD_DIM)``, ``l_i``, ``m_i`` and ``offs_m``
    ``(BLOCK_M,)``, ``offs_n`` ``(BLOCK_N,)``, ``k_ptrs`` and ``v_ptrs`` ``(BLOCK_N, HEAD_DIM)``
    pointers to the block at key 0; the scores ``qk`` and weights ``p`` are
    ``(BLOCK_M, BLOCK_N)``."""
    cols = start_n + offs_n
    if USE_TMA:
        k = K.load([b, hk, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = V.load([b, hk, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
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
    # m_i starts at the lowest finite float, not -inf, so m_new is finite even in a row whose
    # scores so far are all -inf (masked, or from a -inf in q or k): exp2(-inf - m_new) is 0,
    # where -inf - (-inf) would be NaN, and no per-row test is needed.
    if MASKED:
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_new[:, None])
    else:
        # Every key is real, and scale-then-subtract is one FMA (qk_scale >= 0, so the maximum
        # of the scaled scores is the scaled maximum).
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(v_dtype).to(v.dtype)  # p rounded to the inputs' dtype, as the tensor cores take it
    # The product accumulates into the rescaled acc: the tensor cores' accumulator, no extra add.
    acc = tl.dot(p, v, acc * alpha[:, None], input_precision=PRECISION)
    return acc, l_i, m_new


@cached_launch
@triton.jit
def flash_fwd_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    H, H_KV, L, S, qk_scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, DOT_FP32: tl.constexpr,
    USE_TMA: tl.constexpr, EVEN_S: tl.constexpr,
):
    """Program ``(query block, b * H + h)``: rows ``start_m .. start_m + BLOCK_M - 1`` of the
    output of one (batch, head). ``Q`` and ``O`` are ``(B, H, L, HEAD_DIM)``, ``K`` and ``V``
    ``(B, H_KV, S, HEAD_DIM)`` (or tensor descriptors of them with ``USE_TMA``), where query head
    ``h`` reads key head ``h // (H // H_KV)`` (grouped-query attention; ``H_KV = H`` is plain
    multi-head), ``LSE`` ``(B, H, L)`` float32; the program holds ``q`` and ``acc``
    ``(BLOCK_M, HEAD_DIM)`` and ``m``, ``l`` ``(BLOCK_M,)``, and folds ``(BLOCK_N, HEAD_DIM)``
    key blocks in with :func:`attend_key_block`. ``EVEN_S`` says that ``BLOCK_N`` divides
    ``S``: without the causal mask no block then needs a mask, and the masked loop is not
    compiled at all."""
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
        hk = h // (H // H_KV)
        q = Q.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        k_ptrs = K
        v_ptrs = V
    else:
        b = (bh // H).to(tl.int64)
        h = (bh % H).to(tl.int64)
        hk = h // (H // H_KV)
        q_ptrs = (Q + b * stride_qb + h * stride_qh
                  + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
        k_ptrs = (K + b * stride_kb + hk * stride_kh
                  + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)
        v_ptrs = (V + b * stride_vb + hk * stride_vh
                  + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        q = tl.load(q_ptrs, mask=offs_m[:, None] < L, other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], LOWEST, tl.float32)  # not -inf: see attend_key_block
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
        acc, l_i, m_i = attend_key_block(acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, b, hk,
                                         start_n, offs_m, offs_n, S, stride_kn, stride_vn,
                                         qk_scale, False, CAUSAL, PRECISION, DOT_FP32, USE_TMA,
                                         BLOCK_N, HEAD_DIM)
    if CAUSAL or not EVEN_S:  # else [full_end, end) is empty: no masked loop to compile
        for start_n in range(full_end, end, BLOCK_N):
            acc, l_i, m_i = attend_key_block(acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, b, hk,
                                             start_n, offs_m, offs_n, S, stride_kn, stride_vn,
                                             qk_scale, True, CAUSAL, PRECISION, DOT_FP32,
                                             USE_TMA, BLOCK_N, HEAD_DIM)

    # A real row saw at least key 0, so l >= 1, unless all its scores were -inf (l = 0): its
    # output is 0 and its lse -inf (LOWEST + log2(0)), the rule of every attention here.
    # Padding rows are not stored.
    acc = acc * tl.where(l_i > 0, 1.0 / l_i, 0.0)[:, None]
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

# Tiles per (GPU class, head dim), measured: teachkit.gpus.gpu_class gives the class; head dims
# 16 and 32 take the tiles of 64; float16 and bfloat16 share their tiles. Class 80/90's
# half-precision entries were measured on an H100 (fp16, B=4, H=32, L=1k-16k, by sweep() below):
# 8 warps on 128 x 64 tiles win for D = 64 and 128; on sm_90, 128 x 128 tiles fed by TMA win for
# D = 128 (506 against 495 TFLOP/s at L = 4096, 543 against 490 at 16384).
_HALF_TILES: dict[tuple[int, int], FlashConfig] = {
    (75, 64): FlashConfig(128, 64, 4, 2),
    (80, 64): FlashConfig(128, 64, 8, 3),
    (89, 64): FlashConfig(128, 64, 4, 3),
    (90, 64): FlashConfig(128, 64, 8, 3),
    (75, 128): FlashConfig(64, 64, 4, 2),
    (80, 128): FlashConfig(128, 64, 8, 4),  # 4 stages: 511 TFLOP/s without a mask
    (89, 128): FlashConfig(128, 64, 8, 2),
    (90, 128): FlashConfig(128, 128, 8, 3, tma=True),
    (75, 256): FlashConfig(32, 32, 4, 2),
    (80, 256): FlashConfig(64, 32, 8, 2),
    (89, 256): FlashConfig(64, 32, 8, 2),
    (90, 256): FlashConfig(64, 32, 8, 2),
}
_CAUSAL_TILES: dict[tuple[int, int], FlashConfig] = {
    (80, 128): FlashConfig(128, 64, 8, 3),  # 3 stages: 449 TFLOP/s causal
}
"""Where a causal launch takes other tiles (a shallower pipeline) than in :data:`_HALF_TILES`."""
_FP32_TILES: dict[int, FlashConfig] = {  # every GPU class: twice the bytes per tile, ieee dot
    64: FlashConfig(64, 32, 4, 2),
    128: FlashConfig(32, 32, 4, 2),
    256: FlashConfig(16, 16, 4, 2),
}


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
        ``(major, minor)`` of the GPU (its class, :func:`teachkit.gpus.gpu_class`, picks the
        row of the measured table); ``None`` means the interpreter's small fixed config.
    causal : bool
        Whether the launch is causal (the measured best pipeline depth differs).

    Returns
    -------
    FlashConfig
        ``(BLOCK_M, BLOCK_N, num_warps, num_stages, tma)``; ``BLOCK_M`` is a multiple of
        ``BLOCK_N``.

    Examples
    --------
    >>> flash_config(64, torch.float16, (8, 0))
    FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=3, tma=False)
    """
    if capability is None:
        return _INTERPRETER_CONFIG
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported; pass one of {HEAD_DIMS}")
    d = max(head_dim, 64)  # head dims 16 and 32 take the tiles of 64
    if dtype == torch.float32:
        return _FP32_TILES[d]
    key = (gpu_class(capability), d)
    return _CAUSAL_TILES.get(key, _HALF_TILES[key]) if causal else _HALF_TILES[key]


def table_config(q: torch.Tensor, causal: bool) -> FlashConfig:
    """:func:`flash_config`'s choice for queries ``q`` on the device they are on (the
    interpreter's one small configuration off the GPU): the configuration ``flash_attention``
    launches when it is given none. Passing it as ``config`` runs this module's Triton kernel
    as the table has it, also where ``flash_attention`` would pick the Gluon kernel (Hopper).

    Examples
    --------
    >>> import teachkit
    >>> q = torch.zeros(1, 1, 4, 64, device=teachkit.DEVICE)
    >>> isinstance(table_config(q, causal=False), FlashConfig)
    True
    """
    return flash_config(q.shape[-1], q.dtype,
                        None if INTERPRETED else compute_capability(q.device), causal)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    scale: float | None = None, return_lse: bool = False, *,
    config: FlashConfig | None = None, autotune: bool = False,
    backward_config: BackwardConfig | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Attention :math:`\mathrm{softmax}(q k^T \cdot scale)\, v` by FlashAttention's forward pass.

    Parameters
    ----------
    q : torch.Tensor
        ``(B, H, L, D)`` queries, float16, bfloat16 or float32, any strides; on the GPU when
        there is one (CPU tensors under Triton's interpreter).
    k, v : torch.Tensor
        ``(B, H_kv, S, D)`` keys and values, q's dtype and device. ``H_kv`` is ``H`` or, for
        grouped-query attention, a divisor of it: query head ``h`` attends to key head
        ``h // (H // H_kv)``, as ``scaled_dot_product_attention(..., enable_gqa=True)``. ``D``
        is one of :data:`HEAD_DIMS`; ``L`` and ``S`` are any lengths.
    causal : bool
        As ``is_causal=True`` of ``scaled_dot_product_attention``: query ``i`` sees keys
        ``j <= i`` (top-left aligned, also when ``L != S``).
    scale : float, optional
        Multiplies the scores; defaults to ``1/sqrt(D)``. Any sign: a negative scale is run as
        ``(-q)`` with ``|scale|``.
    return_lse : bool
        Also return the log-sum-exp of every row's scaled scores.
    config : FlashConfig, optional
        Launch this module's Triton kernel with these tiles, warps and stages instead of the
        table's choice (for tuning sweeps; on a Hopper GPU this also keeps the forward pass off
        the Gluon kernel, see Notes); ``block_m`` must be a multiple of ``block_n``, both powers
        of two >= 16.
    autotune : bool
        Time the candidates of :func:`candidate_configs` on this problem the first time its
        kind is seen and keep the fastest (:func:`tuned_config`). Under the interpreter there is
        one small candidate, so this changes nothing there.
    backward_config : BackwardConfig, optional
        The backward's tiles instead of the table's choice
        (:func:`~teachkit.kernels.flash_backward.backward_config`). ``atomic_dq=True`` takes
        FlashAttention-2's single loop with atomic adds on ``dQ`` (not bitwise reproducible)
        instead of the two loops. Only used when the call is differentiated.

    Returns
    -------
    out : torch.Tensor
        ``(B, H, L, D)`` in q's dtype; zeros when ``S = 0``, as ``scaled_dot_product_attention``.
    lse : torch.Tensor
        Only with ``return_lse``: ``(B, H, L)`` float32, natural log; ``-inf`` when ``S = 0``.

    Notes
    -----
    Differentiable: when grad mode is on and an input requires grad, the call goes through
    :class:`FlashAttentionFunction`, whose backward runs the kernels of
    :mod:`teachkit.kernels.flash_backward` (gradients of ``out`` and of ``lse``); otherwise it
    launches the forward kernel alone.

    On a Hopper GPU (compute capability 9.x), float16/bfloat16 inputs that are contiguous,
    with ``L`` a multiple of 128, at head dim 128 (``S`` a multiple of 128) or at head dim 64
    with ``S`` a multiple of 256 from 1024 keys a query reads on (``S``; ``min(L, S)`` with the
    causal mask), run their forward pass with the Gluon kernel of
    :mod:`teachkit.kernels.flash_hopper` (FlashAttention-3's warp specialisation), in the form
    :func:`~teachkit.kernels.flash_hopper.hopper_form` gives the sizes, unless
    ``config`` or ``autotune`` asks for this module's kernel
    (:func:`~teachkit.kernels.flash_hopper.hopper_preferred` decides). Both compute the same
    numbers the same way; the backward pass is the same.

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
    key = replay_key(q, k, v, causal, scale, return_lse, config, autotune, backward_config)
    replay = FLASH_REPLAYS.get(key)
    if replay is not None:  # a kind of call met before: its launch, made again
        return replay(q, k, v, return_lse)
    check_inputs(q, k, v)
    if config is not None:
        _check_config(config)
    if backward_config is not None:
        _check_backward_config(backward_config)
    causal = require_bool(causal, "causal")
    require_bool(return_lse, "return_lse")
    scale = resolve_scale(scale, q.shape[-1])
    if scale < 0:  # softmax(s q k^T) = softmax(|s| (-q) k^T): the kernel wants scale >= 0
        q, scale = -q, -scale
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = FlashAttentionFunction.apply(q, k, v, causal, scale, config, autotune,
                                                backward_config)
    else:
        out, lse, made = _forward(q, k, v, causal, scale, config, autotune, return_lse)
        if key is not None and made is not None:
            _remember(key, made)
    return (out, lse) if return_lse else out


def replay_key(q: object, k: object, v: object, causal: object, scale: object,
               return_lse: object, config: object, autotune: object,
               backward_config: object) -> tuple | None:
    """What decides :func:`flash_attention`'s launch for these arguments, besides the tensors'
    addresses: each tensor's dtype, shape, strides, 16-byte alignment and GPU, the other
    arguments, the current GPU and Triton's
    :func:`~teachkit.kernels.launch_cache.launch_settings`. ``None`` for a call that is not
    kept (:data:`FLASH_REPLAYS`): q not on the kernels' device, a tensor subclass, a call that
    autograd would record, ``autotune``, a ``backward_config``, a negative ``scale`` (the call
    negates q) or one that is not a Python number, a ``config`` whose fields are not of
    ``FlashConfig``'s types."""
    if not (type(q) is torch.Tensor and type(k) is torch.Tensor and type(v) is torch.Tensor
            and q.is_cuda == ON_GPU and type(causal) is bool and type(return_lse) is bool
            and autotune is False and backward_config is None
            and (scale is None or (type(scale) is float or type(scale) is int) and scale >= 0)
            and (config is None or type(config) is FlashConfig
                 and tuple(map(type, config)) == (int, int, int, int, bool))):
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return None
    gpu = (current_gpu(),) if ON_GPU else ()
    return (tensor_key(q), tensor_key(k), tensor_key(v), causal, scale, return_lse, config,
            *gpu, launch_settings())


class FlashReplay(NamedTuple):
    """What :func:`flash_attention` needs to make one kind of call's launch again
    (:func:`replay_key`): the launcher call, and the kernel it launches. That is this module's
    :func:`flash_fwd_kernel` with ``config``, reading q, k and v through TMA descriptors where
    ``tma``; or, where ``config`` is ``None``, the Gluon kernel of
    :mod:`teachkit.kernels.flash_hopper` in key blocks of ``hopper_block_n``."""

    launch: LaunchReplay | None
    config: FlashConfig | None
    tma: bool = False
    hopper_block_n: int | None = None

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, return_lse: bool,
                 ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """:func:`flash_attention` of these tensors, of the kind this replay was kept for."""
        out, lse = _outputs(q, return_lse)
        if self.config is None:  # the Gluon kernel: descriptors of q, k, v and out, the lse
            operands = (*hopper_descriptors(q, k, v, out, self.hopper_block_n), lse)
        else:
            operands = (*kernel_operands(q, k, v, self.config, self.tma), out, lse)
        self.launch(q.get_device(), *[t.data_ptr() if type(t) is torch.Tensor else t
                                      for t in operands])
        return (out, lse) if return_lse else out


FLASH_REPLAYS: dict[tuple, FlashReplay] = replay_table()
"""For each kind of call of :func:`flash_attention` without autograd (:func:`replay_key`), its
:class:`FlashReplay`: the next call of that kind skips the checks, the choice of kernel and
configuration and the launch cache's key. At most
:data:`~teachkit.kernels.launch_cache.MAX_KEYS` kinds; the next one empties it."""


def _remember(key: tuple, made: tuple) -> None:
    """Keep the launch a call without autograd made (``made``, from :func:`_forward`) in
    :data:`FLASH_REPLAYS` under ``key``, where it can be made again."""
    kernel, grid, args, options, kept = made
    launch = launch_replay(kernel, grid, args, options)
    if launch is not None:
        keep(FLASH_REPLAYS, key, kept._replace(launch=launch))


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
             config: FlashConfig | None, autotune: bool, lse_wanted: bool = True,
             ) -> tuple[torch.Tensor, torch.Tensor, tuple | None]:
    """``(out, lse, made)`` of validated inputs with ``scale >= 0``: ``made`` is the launch it
    made on the current GPU (:func:`_launch_for`), ``None`` where it made none there. Without
    ``lse_wanted`` the lse is written to a buffer kept for the next call on this CUDA stream
    (:func:`~teachkit.kernels.scratch.stream_scratch`), which the caller must not keep."""
    if on_other_gpu(q):  # as torch's ops do: launch on q's GPU, whichever device is current
        with torch.cuda.device(q.device):
            out, lse, _ = _forward(q, k, v, causal, scale, config, autotune, lse_wanted)
            return out, lse, None  # made on q's GPU, not the current one: not to be kept
    B, H, L, D = q.shape
    if k.shape[2] == 0:  # no keys: zeros and -inf, as scaled_dot_product_attention gives
        out = torch.zeros((B, H, L, D), dtype=q.dtype, device=q.device)
        lse = torch.full((B, H, L), float("-inf"), dtype=torch.float32, device=q.device)
        return out, lse, None
    out, lse = _outputs(q, lse_wanted)
    if out.numel() == 0:
        return out, lse, None
    made = _launch_for(q, k, v, out, lse, causal, scale, config, autotune)
    kernel, grid, args, options, _ = made
    kernel[grid](*args, **options)
    return out, lse, made


def _launch_for(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                lse: torch.Tensor, causal: bool, scale: float, config: FlashConfig | None,
                autotune: bool) -> tuple:
    """The launch of a forward pass: the kernel, its grid, arguments and options, and the
    :class:`FlashReplay` (its launcher call still ``None``) that makes it again for another
    call of its kind. The Gluon kernel (``launch_hopper``'s arguments) where
    :func:`~teachkit.kernels.flash_hopper.hopper_preferred` takes the inputs and no
    configuration is asked for, else this module's kernel with ``config``, the autotuner's or
    the table's (:func:`launch`'s arguments)."""
    if (config is None and not autotune and hopper_preferred is not None
            and hopper_preferred(q, k, v, causal)):
        # FlashAttention-3's structure, in the form for these sizes on this GPU
        B, H, L, D = q.shape
        form = hopper_form(D, L, k.shape[2], causal, B * H, multiprocessors(q.device))
        kernel, grid, args, options = hopper_launch_arguments(
            q, k, v, out, lse, causal, scale, form.overlap, form.block_n, form.persistent)
        return kernel, grid, args, options, FlashReplay(None, None, hopper_block_n=form.block_n)
    if config is None and autotune:
        config = tuned_config(q, k, v, causal, scale)
    if config is None:
        config = table_config(q, causal)
    grid, args, options = launch_arguments(q, k, v, out, lse, causal, scale, config)
    return flash_fwd_kernel, grid, args, options, FlashReplay(None, config, options["USE_TMA"])


def _outputs(q: torch.Tensor, lse_wanted: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The output (contiguous, q's shape and dtype; every row is written) and the lse of a
    forward pass: the caller's own with ``lse_wanted``, else a buffer kept per CUDA stream."""
    B, H, L = q.shape[:3]
    out = contiguous_like(q)
    if lse_wanted:
        lse = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    else:
        lse = stream_scratch(("flash lse", B, H, L), lambda: torch.empty(
            (B, H, L), dtype=torch.float32, device=q.device), q.device)
    return out, lse


class FlashAttentionFunction(torch.autograd.Function):
    """FlashAttention as an autograd function: the forward kernel, then the three backward
    kernels of :mod:`teachkit.kernels.flash_backward` from the saved inputs, output and lse.

    Only ``flash_attention`` applies it, and only when an input requires grad, so a call without
    grad costs nothing extra. Both outputs are differentiable: a loss that uses the lse (as a
    merge of partial results does) adds ``dlse * P`` to the scores' gradient.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor, causal: bool, scale: float, config: FlashConfig | None,
                autotune: bool, backward_config: BackwardConfig | None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse, _ = _forward(q, k, v, causal, scale, config, autotune)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.backward_config = causal, scale, backward_config
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @once_differentiable  # the backward kernels have no backward: a second derivative says so
    def backward(ctx: torch.autograd.function.FunctionCtx, dout: torch.Tensor | None,
                 dlse: torch.Tensor | None) -> tuple:
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:  # only the lse was used
            dout = torch.zeros_like(out)
        if q.numel() == 0 or k.shape[2] == 0:  # nothing was attended: no gradient
            dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        else:
            dq, dk, dv = flash_backward(dout, q, k, v, out, lse, ctx.causal, ctx.scale, dlse,
                                        ctx.backward_config)
        return dq, dk, dv, None, None, None, None, None


def _check_config(config: FlashConfig) -> None:
    if not isinstance(config, FlashConfig):
        raise TypeError(f"config must be a FlashConfig, got {type(config).__name__}")
    bm, bn = config.block_m, config.block_n
    if not all(b >= 16 and b & (b - 1) == 0 for b in (bm, bn)) or bm % bn:
        raise ValueError(
            f"config needs block_m and block_n powers of two >= 16 with block_m a multiple of "
            f"block_n, got block_m={bm}, block_n={bn}; e.g. FlashConfig(128, 64, 8, 3)"
        )


def _check_backward_config(config: BackwardConfig) -> None:
    if not isinstance(config, BackwardConfig):
        raise TypeError(f"backward_config must be a BackwardConfig, got {type(config).__name__}")
    blocks = (config.kv_block_m, config.kv_block_n, config.q_block_m, config.q_block_n)
    if (not all(b >= 16 and b & (b - 1) == 0 for b in blocks)
            or config.kv_block_n % config.kv_block_m or config.q_block_m % config.q_block_n):
        raise ValueError(
            f"backward_config needs powers of two >= 16 with kv_block_n a multiple of kv_block_m "
            f"and q_block_m a multiple of q_block_n, got (kv_block_m, kv_block_n, q_block_m, "
            f"q_block_n) = {blocks}; e.g. BackwardConfig(32, 128, 4, 3, 128, 32, 4, 3)"
        )
    for name in ("kv_warps", "q_warps"):
        if getattr(config, name) not in (1, 2, 4, 8, 16):
            raise ValueError(f"backward_config.{name} must be 1, 2, 4, 8 or 16, "
                             f"got {getattr(config, name)!r}")
    for name in ("kv_stages", "q_stages"):
        if not 1 <= getattr(config, name) <= 8:
            raise ValueError(f"backward_config.{name} must be 1 to 8, "
                             f"got {getattr(config, name)!r}")
    for name in ("atomic_dq", "kv_warp_specialize", "kv_hopper", "kv_hopper_dq"):
        if not isinstance(getattr(config, name), bool):
            raise TypeError(f"backward_config.{name} must be True or False, "
                            f"got {getattr(config, name)!r}")


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
           lse: torch.Tensor, causal: bool, scale: float, config: FlashConfig) -> None:
    """Launch the kernel with ``config`` on validated inputs, writing ``out`` and ``lse``.

    No checks: :func:`flash_attention` is the entry point; tuning sweeps call this directly.
    """
    grid, args, options = launch_arguments(q, k, v, out, lse, causal, scale, config)
    flash_fwd_kernel[grid](*args, **options)


def launch_arguments(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     lse: torch.Tensor, causal: bool, scale: float, config: FlashConfig,
                     ) -> tuple[tuple, tuple, dict]:
    """The grid, the arguments and the options (constexprs, warps, stages) with which
    :func:`launch` launches :func:`flash_fwd_kernel`: a program per ``block_m`` query rows of
    each (batch, head); q, k and v as :func:`kernel_operands` gives them, the output and its
    lse, every tensor's strides, the sizes and the scale."""
    B, H, L, D = q.shape
    grid = (cdiv(L, config.block_m), B * H)
    use_tma = config.tma and _tma_ok(q, k, v)
    Q, K, V = kernel_operands(q, k, v, config, use_tma)
    args = (Q, K, V, out, lse,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            H, k.shape[1], L, k.shape[2], scale)
    options = dict(
        CAUSAL=causal, HEAD_DIM=D, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        DOT_FP32=INTERPRETED and q.dtype == torch.bfloat16, USE_TMA=use_tma,
        EVEN_S=k.shape[2] % config.block_n == 0,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return grid, args, options


def kernel_operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, config: FlashConfig,
                    use_tma: bool) -> tuple:
    """What the kernel reads q, k and v through: the tensors, or with ``use_tma`` TMA
    descriptors of ``config``'s tiles (``block_m`` query rows, ``block_n`` key rows)."""
    if not use_tma:
        return q, k, v
    from triton.tools.tensor_descriptor import TensorDescriptor

    D = q.shape[-1]

    def descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:  # tiles of rows x D
        return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, D])

    return (descriptor(q, config.block_m), descriptor(k, config.block_n),
            descriptor(v, config.block_n))


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



# ---------------------------------------------------------------------------------------------
# Choosing the configuration by measurement: candidates, a timed sweep, the autotuner's cache
# ---------------------------------------------------------------------------------------------
# Four numbers set how the kernel runs: BLOCK_M query rows per program (more rows reuse each
# loaded key block more often), BLOCK_N keys per step (larger steps mean fewer rescalings and
# longer matrix products, but more registers and shared memory), num_warps (the threads that
# share a tile) and num_stages (how many key/value blocks the compiler prefetches while the
# current one is used). The best choice depends on the GPU, the head dim, the dtype and the mask.
# Under Triton's interpreter there is one small candidate: timings there say nothing about a GPU.
TUNED: dict[tuple, FlashConfig] = {}
"""The autotuner's choices, keyed by (device, head dim, dtype, causal, length buckets)."""


def candidate_configs(head_dim: int, dtype: torch.dtype,
                      capability: tuple[int, int] | None) -> list[FlashConfig]:
    """The configurations worth timing for one head dim and dtype on one GPU.

    ``BLOCK_M`` in 64/128, ``BLOCK_N`` in 32/64/128 (at most ``BLOCK_M``: the causal loop needs
    ``BLOCK_M`` to be a multiple of ``BLOCK_N``), 4 or 8 warps, 2 to 4 stages; tiles whose
    operands alone would not fit in the GPU's shared memory are left out (the compiler would
    refuse them). ``capability=None`` (the interpreter) gives the one small config.

    Examples
    --------
    >>> len(candidate_configs(64, torch.float16, (9, 0))) > 10
    True
    >>> candidate_configs(64, torch.float16, None)
    [FlashConfig(block_m=16, block_n=16, num_warps=4, num_stages=1, tma=False)]
    """
    if capability is None:
        return [flash_config(head_dim, dtype, None)]
    cap = capability[0] * 10 + capability[1]
    limit = max(v for c, v in SHARED_MEMORY_LIMIT.items() if c <= cap) if cap >= 75 else 48 * 1024
    size = dtype.itemsize
    out = []
    for bm in (64, 128):
        for bn in (32, 64, 128):
            if bm % bn:
                continue
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    # q once, plus `stages` buffers of a k and a v block
                    smem = size * head_dim * (bm + 2 * bn * stages)
                    if smem <= limit:
                        out.append(FlashConfig(bm, bn, warps, stages))
                        if capability[0] == 9 and size == 2 and warps == 8 and bm == 128:
                            out.append(FlashConfig(bm, bn, warps, stages, tma=True))
    return out


def sweep(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
          scale: float | None = None, configs: list[FlashConfig] | None = None,
          progress: bool = True) -> list[tuple[FlashConfig, float | None]]:
    """Time the kernel with every configuration on one problem; fastest first.

    Parameters
    ----------
    q, k, v : torch.Tensor
        As for :func:`flash_attention` (validated there first).
    causal : bool
        The mask to tune for.
    scale : float, optional
        Defaults to ``1/sqrt(D)``.
    configs : list of FlashConfig, optional
        Defaults to :func:`candidate_configs` for the inputs and this GPU.
    progress : bool
        Draw a progress bar over the configurations (on a GPU; nothing is timed under the
        interpreter, so nothing is drawn there).

    Returns
    -------
    list of (FlashConfig, float or None)
        Each configuration with its median time in ms (``triton.testing.do_bench``), or None
        where it did not compile or launch (too much shared memory, too many registers).
        Under the interpreter every time is None: nothing is timed there.
    """
    check_inputs(q, k, v)
    D = q.shape[-1]
    scale = D ** -0.5 if scale is None else float(scale)
    cap = None if INTERPRETED else compute_capability(q.device)
    configs = configs if configs is not None else candidate_configs(D, q.dtype, cap)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if INTERPRETED:
        return [(cfg, None) for cfg in configs]
    import triton.testing

    from ..progress import each_job, progress_bar

    timed: list[tuple[FlashConfig, float | None]] = []
    problem = f"D={D} L={q.shape[-2]}" + (" causal" if causal else "")
    with progress_bar(len(configs), progress) as bar:
        for cfg in each_job(bar, configs, lambda c: f"{problem} {_short(c)}"):
            try:
                ms = triton.testing.do_bench(
                    lambda cfg=cfg: launch(q, k, v, out, lse, causal, scale, cfg),
                    warmup=10, rep=40, return_mode="median")
            except Exception:  # noqa: BLE001 - out of resources or a compile failure: not one
                ms = None
            timed.append((cfg, ms))
    return sorted(timed, key=lambda t: float("inf") if t[1] is None else t[1])


def _short(cfg: FlashConfig) -> str:
    """A configuration in a few characters, for a progress bar: ``'128x64 w8 s3'``."""
    return (f"{cfg.block_m}x{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}"
            + (" tma" if cfg.tma else ""))


def _bucket(n: int) -> int:
    """Lengths that tune alike share a power-of-two bucket."""
    return 1 << max(n - 1, 0).bit_length()


def tuned_config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 scale: float | None = None, progress: bool = True) -> FlashConfig:
    """The fastest configuration for this kind of problem, measured once and remembered.

    The first call for a (device, head dim, dtype, causal, power-of-two length buckets) key runs
    :func:`sweep` on the given inputs (with a progress bar unless ``progress=False``); later
    calls reuse the winner from :data:`TUNED`.
    """
    key = (str(q.device), q.shape[-1], q.dtype, causal, _bucket(q.shape[-2]), _bucket(k.shape[-2]))
    if key not in TUNED:
        best, ms = sweep(q, k, v, causal, scale, progress=progress)[0]
        if ms is None and not INTERPRETED:
            raise RuntimeError(f"no FlashAttention configuration ran for {key}")
        TUNED[key] = best
    return TUNED[key]
