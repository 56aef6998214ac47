r"""Exercises of notebook 12, *FlashAttention's backward pass*.

Two exercises, each with a checker ``check_<name>(fn)`` here and a solution ``solution_<name>``
in :mod:`teachkit.exercises.solutions.ex12`:

1. :func:`check_softmax_backward`: the gradient of the scores from the probabilities and their
   gradient, :math:`dS = P \circ (dP - \delta)` with :math:`\delta_i = \sum_j P_{ij} dP_{ij}`,
   in PyTorch.
2. :func:`check_delta_kernel`: the backward's first kernel in Triton,
   :math:`\delta_i = \sum_d O_{id}\, dO_{id}` for a block of rows, accumulated in float32.

Each checker runs the learner's code on fresh random inputs and compares with float64: the first
with autograd through ``torch.softmax``, the second with the product summed in float64. The
Triton checker launches the learner's kernel itself, so only a kernel can pass it.

Examples
--------
>>> from teachkit.exercises.solutions.ex12 import solution_softmax_backward
>>> check_softmax_backward(solution_softmax_backward)
[correct] The softmax's backward: dS from P and dP
"""

from __future__ import annotations

import torch
import triton

from ..compare import relative_error
from ..device import DEVICE
from .checking import (
    ExerciseFailed,
    call_learner,
    exercise,
    expect,
    expect_close,
    fresh_generator,
    matching_mistake,
    random_int,
    random_normal,
)
from .launching import SENTINEL, launch, require_kernel

__all__ = ["check_softmax_backward", "check_delta_kernel"]

RTOL = {torch.float64: 1e-10, torch.float32: 1e-3, torch.bfloat16: 5e-2}
"""Tolerances by dtype, the least a case allows: dP - delta cancels where one weight is near 1,
so float32 keeps fewer digits than its epsilon there, and :func:`_rounding_bound` widens a case
by what the formula's own rounding can move it."""


def _rounding_bound(p: torch.Tensor, dp: torch.Tensor, ds: torch.Tensor,
                    dtype: torch.dtype) -> float:
    """The relative error ``P * (dP - delta)`` computed in ``dtype`` may have against float64 on
    the same inputs: delta's sum is off by up to ``N eps sum_j |P_j dP_j|`` and ``dP - delta``
    by ``eps (|dP| + |delta|)`` more, each times ``P``; against the size of ``ds``, twice over."""
    scale = float(ds.norm())
    if scale == 0.0:
        return RTOL[dtype]
    n = p.shape[-1]
    size = (p.abs() * (dp.abs() + (p * dp).abs().sum(-1, keepdim=True))).norm()
    return max(RTOL[dtype], 2 * (n + 2) * torch.finfo(dtype).eps * float(size) / scale)


# --------------------------------------------------------------------------------------------
# Exercise 1: the softmax's backward
# --------------------------------------------------------------------------------------------
def _softmax_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(case, scores, dP)`` in float64: the probabilities are the scores' softmax."""
    # more keys than rows (and than the batch's 2 and 3), so a delta that lost its last axis
    # never broadcasts by accident against dP: it fails on shape, with keepdim's advice
    n = random_int(7, 60, g) | 1
    rows = random_int(2, 6, g)
    masked = random_normal(rows, n, gen=g)
    masked[:, ::3] = float("-inf")  # masked keys: P = 0 there
    return [
        (f"{rows} rows of {n} scores", random_normal(rows, n, gen=g),
         random_normal(rows, n, gen=g)),
        (f"{rows} rows of {n} scores times 8 (a few large weights)",
         random_normal(rows, n, gen=g, scale=8), random_normal(rows, n, gen=g)),
        (f"{rows} rows of {n}, every third key masked (P = 0)", masked,
         random_normal(rows, n, gen=g)),
        (f"a batch (2, 3, {n}) with dP shifted by 5 on every entry",
         random_normal(2, 3, n, gen=g), random_normal(2, 3, n, gen=g, shift=5.0)),
    ]


def _softmax_mistakes(p: torch.Tensor, dp: torch.Tensor) -> dict[str, torch.Tensor]:
    """Usual wrong answers on ``(p, dp)``, each with what it misses."""
    delta = (p * dp).sum(-1, keepdim=True)
    return {
        "it is P * dP: the softmax couples a row's entries, so each score's gradient also "
        "loses its share of the denominator, P_ij * delta_i with delta_i = sum_j P_ij dP_ij.":
            p * dp,
        "delta is the sum of dP over the row, unweighted: weight it by P, "
        "delta_i = sum_j P_ij dP_ij (then a constant added to dP changes nothing).":
            p * (dp - dp.sum(-1, keepdim=True)),
        "it is dP - delta, not multiplied by P: masked keys (P = 0) must get no gradient.":
            dp - delta,
        "delta was summed over the rows (dim=-2), not along each row (dim=-1).":
            p * (dp - (p * dp).sum(-2, keepdim=True)),
        "it has P * delta with the wrong sign: dS = P * (dP - delta).": p * (dp + delta),
    }


@exercise(
    "The softmax's backward: dS from P and dP",
    hint="Differentiate p_k with respect to s_j for one row, then apply the chain rule: one "
         "number appears that is the same for the whole row.",
    forbid=("teachkit.attention_backward.softmax_delta",
            "teachkit.attention_backward.attention_gradients",
            "teachkit.attention_backward.blockwise_attention_backward", "torch.autograd.grad",
            "torch.autograd.backward", "torch.Tensor.backward", "torch._softmax_backward_data",),
)
def check_softmax_backward(fn: object) -> None:
    """Call ``fn(p, dp)`` on rows of probabilities and compare with float64 autograd through
    ``torch.softmax``.

    Parameters
    ----------
    fn
        The learner's ``softmax_backward(p, dp) -> ds``, ``(..., N)`` tensors.
    """
    g = fresh_generator()
    for number, (case, scores, dp) in enumerate(_softmax_cases(g)):
        s = scores.clone().requires_grad_()
        torch.softmax(s, -1).backward(dp)
        p = torch.softmax(scores, -1)
        # float64 (against autograd) and float32 on every case, bfloat16 on plain rows; the
        # rounded inputs are checked against the formula in float64 on those same inputs
        # (rounding P near 1 alone moves dP - delta by more than the tolerance).
        for dtype in (torch.float64, torch.float32, torch.bfloat16)[:3 if number == 0 else 2]:
            p_in, dp_in = p.to(dtype), dp.to(dtype)
            if dtype != torch.float64:
                p64, dp64 = p_in.double(), dp_in.double()
                want = p64 * (dp64 - (p64 * dp64).sum(-1, keepdim=True))
                rtol = _rounding_bound(p64, dp64, want, dtype)
            else:
                want, rtol = s.grad, RTOL[dtype]
            got = call_learner(fn, f"{case}, {dtype}", p_in, dp_in,
                               advice="delta has one number per row: keep its last axis "
                               "(keepdim=True) so it broadcasts against dP.")
            expect(isinstance(got, torch.Tensor) and got.dtype == dtype,
                   f"On {case}: return a tensor in p's dtype ({dtype}), got "
                   f"{getattr(got, 'dtype', type(got).__name__)}.")
            if dtype == torch.float64:
                mistake = matching_mistake(got, _softmax_mistakes(p, dp), rtol=1e-6)
                if mistake:
                    raise ExerciseFailed(f"On {case}: your gradient matches a usual mistake: "
                                         + mistake)
            expect_close(got, want, f"{case}, {dtype}", rtol=rtol,
                         advice="dS = P * (dP - delta), delta_i = sum_j P_ij dP_ij.")


# --------------------------------------------------------------------------------------------
# Exercise 2: delta in Triton
# --------------------------------------------------------------------------------------------
@exercise(
    "delta = rowsum(dO * O) in Triton",
    hint="Each program: a masked tile of O and one of dO, their product summed along the head dim"
         " in float32, a masked store of one number per row.",
    forbid=("teachkit.kernels.flash_backward.flash_bwd_delta_kernel",),
)
def check_delta_kernel(kernel: object) -> None:
    """Launch the learner's ``@triton.jit`` kernel
    ``(O, DO, DELTA, n_rows, stride_o, stride_do, HEAD_DIM, BLOCK_M)`` on odd numbers of rows,
    rows further apart than ``HEAD_DIM``, three dtypes and large values; compare with the
    product summed in float64, and check nothing is written past the last row.

    Parameters
    ----------
    kernel
        The learner's ``@triton.jit`` function.
    """
    require_kernel(kernel, "(O, DO, DELTA, n_rows, stride_o, stride_do, HEAD_DIM, BLOCK_M)")
    g = fresh_generator()
    for head_dim, block_m in ((16, 16), (64, 32)):
        n_rows = random_int(20, 90, g) | 1  # never a multiple of the block
        for dtype, scale in ((torch.float32, 1.0), (torch.float16, 1.0), (torch.bfloat16, 30.0)):
            case = (f"{n_rows} rows of HEAD_DIM = {head_dim}, BLOCK_M = {block_m}, {dtype}"
                    + (f", values times {scale:g}" if scale != 1 else ""))
            # Rows head_dim + 8 elements apart (the kernel must use the strides it is given),
            # and a block of NaN rows after the last, so an unmasked load reads memory that
            # exists and an unmasked store shows.
            wide_o = random_normal(n_rows + block_m, head_dim + 8, gen=g, scale=scale,
                                   dtype=dtype)
            wide_do = random_normal(n_rows + block_m, head_dim + 8, gen=g, dtype=dtype)
            wide_o[n_rows:], wide_do[n_rows:] = float("nan"), float("nan")
            o, do = wide_o[:n_rows, :head_dim], wide_do[:n_rows, :head_dim]
            want = (o.double() * do.double()).sum(-1)
            buffer = torch.full((n_rows + block_m,), SENTINEL, dtype=torch.float32)
            o_dev, do_dev, buf = wide_o.to(DEVICE), wide_do.to(DEVICE), buffer.to(DEVICE)
            grid = (triton.cdiv(n_rows, block_m),)
            launch(
                kernel, grid, case, o_dev[:n_rows, :head_dim], do_dev[:n_rows, :head_dim], buf,
                n_rows, o_dev.stride(0), do_dev.stride(0), HEAD_DIM=head_dim, BLOCK_M=block_m,
                advice="The kernel's arguments are (O, DO, DELTA, n_rows, stride_o, "
                "stride_do, HEAD_DIM, BLOCK_M); tl.sum(..., axis=1) gives one number per row.")
            got = buf.cpu()
            expect(bool((got[n_rows:] == SENTINEL).all()),
                   f"On {case}: your kernel wrote past row {n_rows - 1} of delta. The last "
                   "program's block runs past n_rows: store with mask=rows < n_rows.")
            ours = got[:n_rows]
            if dtype != torch.float32 and bool(torch.isfinite(ours).all()):
                # float32 products and sums are off by ~1e-7; a sum kept in the input's dtype
                # is off by a few of that dtype's epsilons (the order of the sum, CPU or GPU,
                # changes which few), and every other slip by far more.
                err = relative_error(ours, want)
                if 1e-5 < err < 20 * torch.finfo(dtype).eps:
                    raise ExerciseFailed(
                        f"On {case}: your sums look rounded to {dtype} along the way (relative "
                        f"error {err:.2g}, about that dtype's precision). Convert the loaded "
                        "tiles with .to(tl.float32) before multiplying, so the products and the "
                        "sum are float32.")
            expect_close(ours, want, case, rtol=1e-5,
                         advice="Rows start at O + rows * stride_o (stride_o is not HEAD_DIM "
                         "here); multiply in float32 and sum over axis 1 (the head dim).")
