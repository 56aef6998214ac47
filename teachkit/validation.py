"""Input checks shared by every entry point, so each mistake gets the same clear message.

The references in :mod:`teachkit.softmax` and :mod:`teachkit.attention` and the Triton kernels
all validate their inputs here. Each error says what was passed and what to pass instead.
"""

from __future__ import annotations

import math
import numbers

import torch

from .device import ON_GPU, interpreter_switched_off

__all__ = [
    "FLOAT_DTYPES",
    "KERNEL_DTYPES",
    "require_float_tensor",
    "require_kernel_tensor",
    "require_no_grad",
    "require_kernel_world",
    "resolve_scale",
    "require_power_of_two",
    "normalize_dim",
    "require_positive_int",
    "require_kv_heads",
    "require_bool",
    "require_broadcastable",
    "require_attention_inputs",
    "plain_attention_inputs",
    "compute_dtype",
]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The dtypes the torch references take."""
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The dtypes the Triton kernels take (they compute in float32; no float64 path)."""


def require_float_tensor(x: object, name: str = "x") -> torch.Tensor:
    """Return ``x`` if it is a real floating-point tensor, else raise ``TypeError``.

    Parameters
    ----------
    x
        The object to check.
    name
        The argument's name, used in the message.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}; "
            f"wrap it first, e.g. torch.as_tensor({name}, dtype=torch.float32)"
        )
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got {x.dtype}; convert it first, e.g. {name}.float()"
        )
    return x


def normalize_dim(x: torch.Tensor, dim: int, name: str = "x") -> int:
    """Return ``dim`` as a non-negative index into ``x``'s shape, or raise ``ValueError``.

    A 0-d tensor is treated as having one dimension of length one, as ``torch.softmax`` does.
    """
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    ndim = max(x.dim(), 1)
    if not -ndim <= dim < ndim:
        raise ValueError(
            f"dim={dim} is out of range for {name} with {x.dim()} dimension(s) "
            f"(shape {tuple(x.shape)}); pass a dim in [{-ndim}, {ndim - 1}]"
        )
    return dim % ndim


def require_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is a positive ``int``, else raise ``TypeError`` (not an ``int``)
    or ``ValueError`` (below 1), naming ``name``. A plain ``int`` only, not a NumPy integer:
    most callers go on with the value they were given, into kernels and records, where a NumPy
    integer would fail later and less clearly (:func:`require_int` takes one and returns an
    ``int``)."""
    return _require_integer(value, name, 1, "a positive int", int)


def require_int(value: object, name: str, minimum: int = 0) -> int:
    """``value`` as an ``int`` if it is an integer (NumPy's included) ``>= minimum``, else raise
    ``TypeError`` (not an integer) or ``ValueError`` (too small), naming ``name``."""
    return _require_integer(value, name, minimum, f"an int >= {minimum}", numbers.Integral)


def _require_integer(value: object, name: str, minimum: int, wanted: str,
                     kind: type) -> int:
    """The check of :func:`require_positive_int` and :func:`require_int`: ``value`` an
    instance of ``kind`` (never a ``bool``) and at least ``minimum``; ``wanted`` says what to
    pass in their messages."""
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {wanted}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be {wanted}, got {value}; pass {minimum} or more")
    return int(value)


def require_real(value: object, name: str, minimum: float = 0.0) -> float:
    """``value`` as a ``float`` if it is a finite real number ``>= minimum``, else raise
    ``TypeError`` (not a number) or ``ValueError`` (too small, or not finite), naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be a finite number >= {minimum}, got {value}; pass "
                         f"{minimum} or more")
    return float(value)


def require_kv_heads(kv_heads: object, heads: int) -> int:
    """Return ``kv_heads`` if it is a positive ``int`` that divides ``heads`` (grouped-query
    heads: each cache head serves ``heads // kv_heads`` query heads), else raise
    ``TypeError``/``ValueError`` naming it."""
    require_positive_int(kv_heads, "kv_heads")
    if heads % kv_heads:
        raise ValueError(f"kv_heads = {kv_heads} does not divide heads = {heads}; pass a divisor")
    return kv_heads


def require_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a ``bool``, else raise ``TypeError`` (a string such as ``"no"``
    is truthy: taking it as ``True`` would be a silent wrong answer)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def require_broadcastable(*pairs: tuple[str, torch.Tensor]) -> torch.Size:
    """Check that named tensors are floating-point and broadcast together; return the shape.

    Parameters
    ----------
    *pairs
        ``(name, tensor)`` pairs.
    """
    for name, t in pairs:
        require_float_tensor(t, name)
    shapes = [t.shape for _, t in pairs]
    if all(s == shapes[0] for s in shapes):  # the common case, without broadcast_shapes' imports
        return shapes[0]
    try:
        return torch.broadcast_shapes(*(t.shape for _, t in pairs))
    except RuntimeError:
        shapes = ", ".join(f"{name}{tuple(t.shape)}" for name, t in pairs)
        raise ValueError(
            f"shapes do not broadcast together: {shapes}; pass statistics of the same rows "
            "(equal shapes, or shapes that broadcast)"
        ) from None


def require_attention_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[int, int, int]:
    """Check q ``(..., L, D)``, k ``(..., S, D)`` and v ``(..., S, Dv)``; return ``(L, S, D)``.

    Raises ``TypeError`` for non-tensors, non-float or mixed dtypes and ``ValueError`` for ranks
    below 2, unequal batch shapes, unequal head dims of q and k, unequal lengths of k and v and
    tensors on different devices.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_float_tensor(t, name)
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., length, head_dim), got shape "
                f"{tuple(t.shape)}; add a batch/length axis, e.g. {name}.unsqueeze(0)"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; "
            "convert them, e.g. k.to(q.dtype)"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}; "
            "move them, e.g. k.to(q.device)"
        )
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"q, k and v must have the same batch dimensions, got q{tuple(q.shape)}, "
            f"k{tuple(k.shape)}, v{tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same head dim (last axis), got {q.shape[-1]} and "
            f"{k.shape[-1]}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length (axis -2), got {k.shape[-2]} and {v.shape[-2]}"
        )
    return q.shape[-2], k.shape[-2], q.shape[-1]


def plain_attention_inputs(q: object, k: object, v: object, head_dims: tuple[int, ...],
                           kv_heads_axis: int = 1, batch_axis: int | None = 0) -> bool:
    """Whether ``q`` ``(B, H, L, D)`` and ``k``, ``v`` (one 4-D shape, ``D`` last) are the
    common case of a Triton attention kernel on a GPU, asked in a few attribute reads: plain
    tensors of one :data:`KERNEL_DTYPES` dtype on one CUDA device, ``D`` in ``head_dims``, the
    heads of ``k`` at ``kv_heads_axis`` dividing ``H``, and its axis ``batch_axis`` equal to
    ``B`` (``None``: not compared, as for a page pool).

    When this says yes, an entry point's full checks hold; when it says no, the entry point runs
    them, and they name what is wrong. On a CPU it always says no.
    """
    if not (ON_GPU and type(q) is torch.Tensor and type(k) is torch.Tensor
            and type(v) is torch.Tensor):
        return False
    q_shape, k_shape = q.shape, k.shape
    if len(q_shape) != 4 or len(k_shape) != 4 or v.shape != k_shape:
        return False
    B, H, _, D = q_shape
    H_kv, dtype = k_shape[kv_heads_axis], q.dtype
    return (k_shape[3] == D and D in head_dims and H_kv > 0 and H % H_kv == 0
            and (batch_axis is None or k_shape[batch_axis] == B)
            and k.dtype == dtype and v.dtype == dtype and dtype in KERNEL_DTYPES and q.is_cuda
            and q.get_device() == k.get_device() == v.get_device())


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute in: float32 for float16/bfloat16 (as the kernels do), else ``dtype``."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def require_kernel_world() -> None:
    """Raise ``RuntimeError`` when no Triton kernel can run here: ``TRITON_INTERPRET=0`` (or
    another false value) was exported on a machine without a CUDA GPU, so Triton neither
    interprets nor finds a driver to compile for ("0 active drivers")."""
    if interpreter_switched_off():
        raise RuntimeError(
            "TRITON_INTERPRET is set to a false value on a machine without a CUDA GPU, so "
            "Triton has no driver to run kernels on (it would fail with '0 active drivers'); "
            "unset it (unset TRITON_INTERPRET, or del os.environ['TRITON_INTERPRET'] before "
            "importing teachkit) and teachkit runs the kernels in Triton's interpreter"
        )


def require_no_grad(*pairs: tuple[str, object], kernel: str, reference: str) -> None:
    """Raise ``ValueError`` when a tensor of ``pairs`` requires grad while grad mode is on.

    The Triton kernels have no backward pass: their output would silently not require grad.

    Parameters
    ----------
    *pairs
        ``(name, tensor)`` pairs; non-tensors are ignored.
    kernel
        The kernel's name, for the message.
    reference
        A differentiable torch function computing the same, for the message.
    """
    if not torch.is_grad_enabled():
        return
    for name, t in pairs:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise ValueError(
                f"{name} requires grad, but {kernel} has no backward pass (its output would "
                f"carry no gradient); call it under torch.no_grad() or on {name}.detach(), or "
                f"use {reference}, which is differentiable"
            )


def require_kernel_tensor(x: object, name: str, kernel: str, reference: str) -> torch.Tensor:
    """Check a floating input of a Triton kernel: a tensor of :data:`KERNEL_DTYPES` on the
    kernel's device (CUDA with a GPU, CPU under the interpreter) that does not require grad, in a
    world where kernels run (:func:`require_kernel_world`).

    Raises ``TypeError`` (not a tensor, float64 or another dtype) or ``ValueError`` (device,
    requires grad), each naming ``name`` and pointing to ``reference`` (the torch function that
    takes float64 and is differentiable).
    """
    if (ON_GPU and type(x) is torch.Tensor and x.is_cuda and x.dtype in KERNEL_DTYPES
            and not (x.requires_grad and torch.is_grad_enabled())):
        return x  # the common case on a GPU, in a few attribute reads: every check below holds
    require_float_tensor(x, name)
    if x.dtype not in KERNEL_DTYPES:
        raise TypeError(
            f"{kernel} takes float16, bfloat16 or float32 tensors, got {name} of {x.dtype}; use "
            f"{reference} (the torch reference, which takes float64 too), or convert with "
            f"{name}.float()"
        )
    want = "cuda" if ON_GPU else "cpu"
    if x.device.type != want:
        raise ValueError(
            f"{name} is on {x.device} but the kernel runs on the GPU; move it first: "
            f"{name}.cuda()" if ON_GPU else
            f"{name} is on {x.device}; without a GPU, the kernel runs in Triton's interpreter "
            f"and takes CPU tensors: {name}.cpu()"
        )
    require_no_grad((name, x), kernel=kernel, reference=reference)
    require_kernel_world()
    return x


def resolve_scale(scale: object, head_dim: int) -> float:
    """The scale of attention scores: ``1/sqrt(head_dim)`` for ``None``, else ``scale`` as a float.

    Raises ``TypeError`` for a non-number (bools included) and ``ValueError`` for NaN or an
    infinite scale (the scores would be NaN or infinite; pass a finite number).
    """
    if scale is None:
        return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale}; pass e.g. "
                         "1 / math.sqrt(head_dim), or None for that default")
    return float(scale)


def require_power_of_two(value: object, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an ``int`` power of two ``>= minimum``, else raise
    ``TypeError``/``ValueError`` naming ``name`` (Triton block sizes must be powers of two)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (a power of two), got {type(value).__name__}")
    if value < minimum or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= {minimum}, got {value}; pass e.g. "
                         f"{max(minimum, 1 << max(value, 1).bit_length() - 1)}")
    return value
