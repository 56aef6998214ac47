"""What the attention kernels take, checked in one place.

:func:`check_inputs` is the first step of :func:`~teachkit.kernels.flash.flash_attention`, of the
Gluon kernel's :func:`~teachkit.kernels.flash_hopper.flash_attention_hopper` and of the teaching
kernels: a clear ``TypeError``/``ValueError`` that names the argument and says what to pass,
instead of a failure inside a compiled kernel.
"""

from __future__ import annotations

import torch

from ..device import ON_GPU
from ..validation import (
    KERNEL_DTYPES,
    plain_attention_inputs,
    require_attention_inputs,
    require_kernel_world,
)

__all__ = ["HEAD_DIMS", "MAX_GRID_Y", "check_inputs"]

HEAD_DIMS = (16, 32, 64, 128, 256)
"""Head dims the kernels take (powers of two: ``tl.arange`` needs them)."""
MAX_GRID_Y = 65535
"""CUDA's limit on the second grid axis, which holds ``batch * heads``."""
_DEVICE_TYPE = "cuda" if ON_GPU else "cpu"


def check_inputs(q: object, k: object, v: object) -> None:
    """Raise a clear ``TypeError``/``ValueError`` unless ``q``, ``k``, ``v`` suit the kernels.

    ``q`` is ``(B, H, L, D)``, ``k`` and ``v`` ``(B, H_kv, S, D)`` with ``H_kv`` dividing ``H``
    (grouped-query attention; ``H_kv = H`` is plain multi-head attention), one dtype among
    float16, bfloat16 and float32, ``D`` in :data:`HEAD_DIMS`, on the device the kernels run on.
    """
    if plain_attention_inputs(q, k, v, HEAD_DIMS) and q.shape[0] * q.shape[1] <= MAX_GRID_Y:
        return  # the common case, in a few reads
    require_kernel_world()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if isinstance(t, torch.Tensor) and t.dim() != 4:
            raise ValueError(
                f"{name} must have 4 dimensions (batch, heads, length, head_dim), got shape "
                f"{tuple(t.shape)}; add the missing axes, e.g. {name}[None, None] for one head"
            )
    if all(isinstance(t, torch.Tensor) for t in (q, k, v)) and k.shape[1] != q.shape[1]:
        h, h_kv = q.shape[1], k.shape[1]
        if h_kv == 0 or h % h_kv or v.shape[1] != h_kv:
            raise ValueError(
                f"k and v must have the heads of q ({h}) or, for grouped-query attention, a "
                f"number of heads that divides it; got k with {h_kv} and v with {v.shape[1]}"
            )
        q = q[:, :h_kv]  # the other checks compare batch dims: a view with k's head count
    require_attention_inputs(q, k, v)
    if q.dtype not in KERNEL_DTYPES:
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
        d = q.shape[-1]
        padded = next((h for h in HEAD_DIMS if h > d), None)
        raise ValueError(
            f"head dim {d} is not supported; pass one of {HEAD_DIMS}"
            + (f" (pad q, k and v with zeros up to {padded}, and pass scale={d}**-0.5 "
               f"explicitly: the default would be {padded}**-0.5)" if padded else "")
        )
    if q.device.type != _DEVICE_TYPE:
        raise ValueError(
            f"q, k and v are on {q.device} but the kernel runs on the GPU; move them first: "
            "q.cuda()" if ON_GPU else
            f"q, k and v are on {q.device}; without a GPU, the kernel takes CPU tensors"
        )
    if q.shape[0] * max(q.shape[1], 1) > MAX_GRID_Y:
        raise ValueError(
            f"batch * heads must be at most {MAX_GRID_Y}, got {q.shape[0] * q.shape[1]}; "
            "split the batch into several calls"
        )
