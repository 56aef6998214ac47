"""Comparing a result with a reference: relative error that understands NaN and infinities.

Every check in the course (unit tests, exercise checkers, notebook cells) compares against a
float64 reference through these two functions, so "correct" means one thing everywhere; the
attention kernels' checks take that reference from :func:`attention_reference`.
"""

from __future__ import annotations

import torch

__all__ = ["attention_reference", "relative_error", "describe_mismatch"]


def _require_real_tensors(got: object, ref: object) -> None:
    for name, t in (("got", got), ("ref", ref)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}; wrap it, "
                            f"e.g. torch.as_tensor({name})")
        if t.is_complex():
            raise TypeError(f"{name} is complex ({t.dtype}); compare real tensors, e.g. "
                            f"torch.view_as_real({name})")


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest absolute difference divided by the largest magnitude of ``ref`` (finite entries).

    NaN in the same places in both counts as agreement, as do equal infinities; a NaN or
    infinity in one and not the other makes the error ``inf``. Empty tensors give 0.

    Parameters
    ----------
    got, ref : torch.Tensor
        Tensors of one shape (any dtypes, any devices); both are compared in float64 on the CPU.
    """
    _require_real_tensors(got, ref)
    if got.shape != ref.shape:
        raise ValueError(f"shapes differ: got {tuple(got.shape)}, reference {tuple(ref.shape)}")
    g = got.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if g.numel() == 0:
        return 0.0
    special = ~torch.isfinite(r) | ~torch.isfinite(g)
    same_special = (torch.isnan(g) & torch.isnan(r)) | (torch.isinf(r) & (g == r))
    if bool((special & ~same_special).any()):
        return float("inf")
    finite = ~special
    if not bool(finite.any()):
        return 0.0
    scale = r[finite].abs().max().clamp_min(torch.finfo(torch.float64).tiny)
    return float((g[finite] - r[finite]).abs().max() / scale)


def describe_mismatch(got: torch.Tensor, ref: torch.Tensor, limit: int = 3) -> str:
    """A few lines saying where ``got`` and ``ref`` differ most, for error messages."""
    _require_real_tensors(got, ref)
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    g = got.detach().to("cpu", torch.float64).flatten()
    r = ref.detach().to("cpu", torch.float64).flatten()
    nan_bad = torch.isnan(g) != torch.isnan(r)
    lines = []
    if bool(nan_bad.any()):
        idx = torch.nonzero(nan_bad).flatten()[:limit].tolist()
        where = ", ".join(f"[{i}]: got {g[i].item():.4g}, expected {r[i].item():.4g}" for i in idx)
        lines.append(f"{int(nan_bad.sum())} NaN mismatch(es), e.g. {where}")
    diff = (g - r).abs().nan_to_num(nan=0.0, posinf=float("inf"))
    if diff.numel() and bool((diff > 0).any()):
        i = int(diff.argmax())
        lines.append(f"largest difference at flat index {i}: got {g[i].item():.6g}, "
                     f"expected {r[i].item():.6g}")
    return "; ".join(lines) if lines else "no difference"


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        causal: bool = False, scale: float | None = None,
                        mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention and its log-sum-exp in float64, written out: what the course's attention
    kernels are checked against.

    Parameters
    ----------
    q : torch.Tensor
        ``(..., H, L, D)``.
    k, v : torch.Tensor
        ``(..., H_kv, S, D)`` with ``H_kv`` dividing ``H`` (grouped-query attention: query head
        ``h`` reads key head ``h // (H / H_kv)``).
    causal : bool
        Query ``i`` sees keys ``0 .. i`` (the upper-left diagonal, as
        ``scaled_dot_product_attention(is_causal=True)``).
    scale : float, optional
        The scores' factor; ``1 / sqrt(D)`` by default.
    mask : torch.Tensor, optional
        Boolean, broadcastable to ``(..., H, L, S)``: ``True`` where a key is seen (with
        ``causal``, both apply). A row that sees no key gets output 0 and lse ``-inf``.

    Returns
    -------
    tuple of torch.Tensor
        ``out`` ``(..., H, L, D)`` and ``lse`` ``(..., H, L)`` in float64 on ``q``'s device,
        differentiable: pass float64 leaves that require grad for reference gradients.

    Examples
    --------
    >>> q = torch.randn(1, 4, 5, 8)
    >>> k, v = torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    >>> out, lse = attention_reference(q, k, v, causal=True)
    >>> want = torch.nn.functional.scaled_dot_product_attention(
    ...     q.double(), k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1),
    ...     is_causal=True)
    >>> relative_error(out, want) < 1e-12, out.dtype, tuple(lse.shape)
    (True, torch.float64, (1, 4, 5))
    """
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    group = q.shape[-3] // k.shape[-3]
    if group > 1:
        k64, v64 = k64.repeat_interleave(group, -3), v64.repeat_interleave(group, -3)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q64 @ k64.transpose(-2, -1) * scale
    keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device)
    if causal:
        keep = keep.tril()
    if mask is not None:
        keep = keep & mask.to(s.device)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.where(keep, torch.exp(s - lse.nan_to_num(neginf=0.0).unsqueeze(-1)), 0.0)
    return p @ v64, lse
