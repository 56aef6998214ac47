r"""The dK/dV kernel for Hopper (sm_90), warp-specialised: registers for the two accumulators.

:func:`~teachkit.kernels.flash_backward.flash_bwd_dkdv_kernel` holds ``dK`` and ``dV`` of its
key block in registers while it walks over the query blocks. At ``D = 128`` that is 128 float32
values a thread before any tile of a step, and with 8 warps a thread may have at most 255
registers (65,536 per SM over 256 threads): the compiled kernel spills to local memory
(``python -m teachkit.kernels --backward-registers``).

FlashAttention-3 gets out of this with *warp specialisation*: one warpgroup (four warps) only
issues the copies of the next query block, and two *consumer* warpgroups only compute, each
holding half of the key block's rows. The copying warps need few registers, so they give theirs
up (``setmaxnreg.dec``) and the computing warps take them (``setmaxnreg.inc``): 12 warps share
the SM's registers unevenly. Triton 3.6 does this itself for a loop written
``tl.range(..., warp_specialize=True)`` when the kernel has 4 warps and its loads are tensor
descriptors made inside the kernel (``tl.make_tensor_descriptor``): it splits the 128 key rows
between two consumer warpgroups of 64 and adds a producer warpgroup, and the compiled dK/dV
kernel at ``D = 128`` spills a few bytes a thread where the 8-warp kernel spills hundreds
(``--backward-registers`` prints both).

:func:`flash_bwd_dkdv_ws_kernel` is :func:`~teachkit.kernels.flash_backward.flash_bwd_dkdv_kernel`
written that way: one loop (Triton specialises a single loop; a second loop after it made the
compiler give up the specialisation), so every step applies the masks (rows past ``L``, and the
causal diagonal); the grouped query heads of a key head are folded into the same loop. Two
things in it follow from Triton 3.6's compiler rather than from the algorithm, each measured on
an H100 against the same kernel without the specialisation:

* the masks are built inside the loop from offsets relative to the block
  (``tl.arange(0, BLOCK_N)[:, None] - tl.arange(0, BLOCK_M)[None, :] <= start_m - start_n``):
  the same mask built from the key offsets made before the loop gave wrong gradients once the
  loop was split between the two consumer warpgroups;
* two pipeline stages: with three the specialised loop returned NaN.

:func:`~teachkit.kernels.flash_backward.flash_backward` takes this kernel where
:func:`warp_specialized_dkdv` says so: on sm_90, half precision, head dims 64 and 128, with the
tensors' addresses and strides multiples of 16 bytes (what a tensor descriptor needs), when the
configuration asks for it (``BackwardConfig.kv_warp_specialize``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device import INTERPRETED, compute_capability
from .launch_cache import cached_launch

__all__ = ["LOG2E", "WS_HEAD_DIMS", "WS_TILES", "descriptor_ready", "ensure_allocator",
           "flash_bwd_dkdv_ws_kernel", "warp_specialized_dkdv"]

LOG2E = tl.constexpr(1.4426950408889634)
WS_TILES = (64, 128, 4, 2)
"""(BLOCK_M, BLOCK_N, warps, stages) of the warp-specialised dK/dV kernel: 128 held keys, two
consumer warpgroups of 64 each, steps of 64 queries; 4 warps, which Triton turns into 12 (one
producer and two consumer warpgroups); 2 stages (3 returned NaN)."""
WS_HEAD_DIMS = (64, 128)
"""Head dims the warp-specialised kernel takes (its tiles fit sm_90's shared memory)."""


@cached_launch
@triton.jit
def flash_bwd_dkdv_ws_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dkb, stride_dkh, stride_dkn,
    stride_dvb, stride_dvh, stride_dvn,
    H, H_KV, L, S, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    """Program ``(key block, b * H_KV + key head)``: rows ``start_n .. start_n + BLOCK_N - 1``
    of ``dK`` and ``dV``, the tensors as in
    :func:`~teachkit.kernels.flash_backward.flash_bwd_dkdv_kernel` (head dims contiguous). One
    specialised loop walks over ``group * steps`` query blocks: query head ``hk * group + g``,
    block ``first + i * BLOCK_M``."""
    start_n = tl.program_id(0) * BLOCK_N
    bhk = tl.program_id(1)
    b = (bhk // H_KV).to(tl.int64)
    hk = (bhk % H_KV).to(tl.int64)
    group = H // H_KV
    # Tensor descriptors made here: the copy engine loads whole tiles, rows outside as zeros.
    # Queries and dO of batch b are (H, L, D), so one descriptor serves every head of the group.
    kd = tl.make_tensor_descriptor(K + b * stride_kb + hk * stride_kh, [S, HEAD_DIM],
                                   [stride_kn, 1], [BLOCK_N, HEAD_DIM])
    vd = tl.make_tensor_descriptor(V + b * stride_vb + hk * stride_vh, [S, HEAD_DIM],
                                   [stride_vn, 1], [BLOCK_N, HEAD_DIM])
    qd = tl.make_tensor_descriptor(Q + b * stride_qb, [H, L, HEAD_DIM],
                                   [stride_qh, stride_qm, 1], [1, BLOCK_M, HEAD_DIM])
    dod = tl.make_tensor_descriptor(DO + b * stride_dob, [H, L, HEAD_DIM],
                                    [stride_doh, stride_dom, 1], [1, BLOCK_M, HEAD_DIM])
    k = kd.load([start_n, 0])
    v = vd.load([start_n, 0])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    qk_scale = scale * LOG2E

    first = start_n if CAUSAL else 0  # causal: queries before start_n see none of these keys
    steps = tl.cdiv(tl.maximum(L - first, 0), BLOCK_M)
    for t in tl.range(0, group * steps, warp_specialize=True, num_stages=NUM_STAGES):
        g = t // steps
        start_m = first + (t - g * steps) * BLOCK_M
        h = (hk * group + g).to(tl.int32)
        q = qd.load([h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        do = dod.load([h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        m = tl.arange(0, BLOCK_M)
        rows = m < L - start_m
        stat = (b * H + h) * L + start_m
        lse = tl.load(LSE + stat + m, mask=rows, other=0.0) * LOG2E  # log2 units
        lse = tl.where(lse == float("-inf"), float("inf"), lse)  # a row that saw no key: P = 0
        delta = tl.load(DELTA + stat + m, mask=rows, other=0.0)
        qkT = tl.dot(k, tl.trans(q))
        pT = tl.exp2(qkT * qk_scale - lse[None, :])
        keep = rows[None, :]
        if CAUSAL:  # key start_n + i is kept for query start_m + j where i - j <= start_m - start_n
            keep = keep & (tl.arange(0, BLOCK_N)[:, None] - m[None, :] <= start_m - start_n)
        pT = tl.where(keep, pT, 0.0)
        dv = tl.dot(pT.to(do.dtype), do, dv)  # dV += P^T dO
        dpT = tl.dot(v, tl.trans(do))  # (dO V^T)^T
        dsT = (pT * (dpT - delta[None, :])).to(q.dtype)
        dk = tl.dot(dsT, q, dk)  # dK += dS^T Q (unscaled)

    dkd = tl.make_tensor_descriptor(DK + b * stride_dkb + hk * stride_dkh, [S, HEAD_DIM],
                                    [stride_dkn, 1], [BLOCK_N, HEAD_DIM])
    dvd = tl.make_tensor_descriptor(DV + b * stride_dvb + hk * stride_dvh, [S, HEAD_DIM],
                                    [stride_dvn, 1], [BLOCK_N, HEAD_DIM])
    dkd.store([start_n, 0], (dk * scale).to(DK.dtype.element_ty))  # rows past S are not written
    dvd.store([start_n, 0], dv.to(DV.dtype.element_ty))


def warp_specialized_dkdv(config: object, q: torch.Tensor, *tensors: torch.Tensor) -> bool:
    """Whether :func:`~teachkit.kernels.flash_backward.flash_backward` can run dK/dV with
    :func:`flash_bwd_dkdv_ws_kernel`: compiled (not the interpreter) on an sm_90 GPU, float16 or
    bfloat16, a head dim in :data:`WS_HEAD_DIMS`, two loops (``config.atomic_dq`` false) and
    ``q`` and ``tensors`` (k, v, dO, dK, dV) :func:`descriptor_ready`."""
    return (not INTERPRETED and not config.atomic_dq
            and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] in WS_HEAD_DIMS
            and compute_capability(q.device)[0] == 9 and descriptor_ready(q, *tensors))


def descriptor_ready(*tensors: torch.Tensor) -> bool:
    """True when every tensor can be read through a tensor descriptor over its last three axes:
    its address and every stride but the last (which is 1) are multiples of 16 bytes.

    Examples
    --------
    >>> descriptor_ready(torch.zeros(1, 2, 8, 64, dtype=torch.float16))
    True
    >>> descriptor_ready(torch.zeros(1, 2, 8, 68, dtype=torch.float16)[..., :64])  # rows of 136 B
    False
    """
    for t in tensors:
        size = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any(s * size % 16 for s in t.stride()[:-1]):
            return False
    return True


def _torch_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global scratch memory for a Triton kernel, from PyTorch's caching allocator."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_allocator() -> None:
    """Give Triton an allocator for kernels that need global scratch memory (a tensor
    descriptor made on the device is written there), unless one is set: ``triton.set_allocator``
    with PyTorch's caching allocator. Triton keeps the allocator in a context variable, so this
    runs before every such launch (a new thread or task starts without it)."""
    from triton.runtime import _allocation

    current = getattr(_allocation, "_allocator", None)
    if current is None or isinstance(current.get(), _allocation.NullAllocator):
        triton.set_allocator(_torch_scratch)
