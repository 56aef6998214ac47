"""teachkit: the code behind the course *Softmax to FlashAttention*.

Importing it decides the world once (see :mod:`teachkit.device`): on a machine without a CUDA GPU
it sets ``TRITON_INTERPRET=1`` before Triton is imported, so the course's Triton kernels run on
CPU tensors through Triton's interpreter.

Modules
-------
softmax
    naive, safe, online and chunked softmax; ``(m, d)`` statistics and their merge; lse forms.
attention
    naive and blockwise (FlashAttention-style) attention, merging partial results by lse.
reduction
    reducing ``(m, d)`` pairs in any order, and a GPU block's thread/warp/block tree simulated.
numerics
    where ``exp`` overflows and underflows in each dtype.
compare
    relative error against a float64 reference.
traffic
    bytes moved by each softmax formulation, counted and measured (notebook 05).
tiling
    which (query block, key block) tiles a causal kernel computes, masks or skips.
kernels
    the Triton kernels: softmax, FlashAttention, split-KV and paged decoding (imported on
    demand; needs Triton, Linux only).
paging
    a paged KV cache: a simulated allocator, block tables, scattering a cache into pages.
ring
    ring attention across processes on ``torch.distributed`` (gloo on CPUs, NCCL on GPUs).
cute
    the online softmax as a CuTe DSL kernel (optional extra ``[cute]``) and its thread, warp
    and block tiers simulated in torch.
bench
    ``python -m teachkit.bench softmax|ceilings|traffic|attention|decode|host``: kernels
    beside PyTorch and the device's ceilings, and the host's cost of one call.
plots
    matplotlib helpers (imported on demand).
exercises
    the notebooks' exercise checkers (``exercises.exNN``) and, apart, their solutions
    (``exercises.solutions.exNN``).

Examples
--------
>>> import torch, teachkit
>>> x = torch.tensor([1.0, 3.0, 2.0, 5.0])
>>> teachkit.online_softmax(x)
tensor([0.0152, 0.1125, 0.0414, 0.8310])
"""

from . import device  # noqa: I001  (first: decides TRITON_INTERPRET before anything imports triton)
from . import attention, compare, reduction, softmax
from .attention import blockwise_attention, merge_partials, naive_attention
from .compare import relative_error
from .device import DEVICE, ON_GPU, describe, pick
from .softmax import (
    chunked_softmax,
    merge_lse,
    merge_stats,
    naive_softmax,
    online_softmax,
    safe_softmax,
    to_lse,
)
from .source import show_source

__version__ = "0.1.0"

__all__ = [
    "DEVICE",
    "ON_GPU",
    "attention",
    "blockwise_attention",
    "chunked_softmax",
    "compare",
    "describe",
    "device",
    "merge_lse",
    "merge_partials",
    "merge_stats",
    "naive_attention",
    "naive_softmax",
    "online_softmax",
    "pick",
    "reduction",
    "relative_error",
    "safe_softmax",
    "show_source",
    "softmax",
    "to_lse",
]
