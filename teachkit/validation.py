"""Input checks shared by every entry point, so each mistake gets the same clear message.

The references in :mod:`teachkit.softmax` and :mod:`teachkit.attention` and the Triton kernels
all validate their inputs here. Each error says what was passed and what to pass instead.
"""

from __future__ import annotations

import torch

__all__ = [
    "FLOAT_DTYPES",
    "require_float_tensor",
    "normalize_dim",
    "require_positive_int",
    "require_broadcastable",
    "require_attention_inputs",
    "compute_dtype",
]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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
    """Return ``value`` if it is a positive ``int``, else raise ``TypeError``/``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}; pass 1 or more")
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


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute in: float32 for float16/bfloat16 (as the kernels do), else ``dtype``."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
