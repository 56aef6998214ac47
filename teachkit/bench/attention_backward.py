"""``python -m teachkit.bench attention --backward``: the backward pass of FlashAttention beside
SDPA's backends, and the memory of a forward plus backward.

Only the backward is timed: each provider runs its forward once with inputs that require grad,
then ``torch.autograd.grad`` of that output is timed again and again (``retain_graph``). TFLOP/s
= 2.5 x the forward's ``4 B H L S D`` (halved for causal masks): the backward's five matrix
products of ``2 L S D`` flops each per head, against the forward's two, the convention of
FlashAttention's papers and of Triton's tutorial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..device import (
    DEVICE,
    INTERPRETED,
    ON_GPU,
    compute_capability,
    is_out_of_memory,
    skip_if_out_of_memory,
)
from .attention_problems import (
    ATTENTION_LENGTHS,
    HEADS,
    TOKENS,
    TRITON_ONLY,
    attention_flops,
    attention_problems,
    problem_name,
    sdpa_backend,
)
from .core import (
    DTYPES,
    SETTLE_MS,
    TIMING_BYTES,
    Measurement,
    dtype_name,
    each_job,
    progress_bar,
    require_names,
    run_problem,
    time_ms,
)

__all__ = ["BACKWARD_FLOPS_FACTOR", "DETERMINISTIC", "ONE_LOOP", "backward_bytes",
           "backward_params", "backward_providers", "bench_backward", "deterministic_config",
           "one_loop_config", "training_memory", "triton_config"]

BACKWARD_FLOPS_FACTOR = 2.5
"""Backward flops per forward flop: five ``L x S x D`` matrix products against two."""

if TYPE_CHECKING:
    from ..kernels.flash_backward import BackwardConfig

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]


def backward_params(D: int, L: int, causal: bool, dtype: str) -> dict[str, int | bool | str]:
    """The parameters of one backward problem (``L = S``), as its :class:`Measurement` keeps
    them: those of the forward and ``"pass": "backward"``.

    Examples
    --------
    >>> backward_params(64, 4096, True, "fp16")["pass"]
    'backward'
    """
    return {"D": D, "L": L, "S": L, "causal": causal, "dtype": dtype_name(DTYPES[dtype]),
            "pass": "backward"}


def backward_bytes(B: int, H: int, L: int, D: int, dtype: str) -> int:
    """GPU memory one backward problem takes at its peak: q, k, v, the output, dO and the three
    gradients in ``dtype``, float32 copies of the first provider's gradients to check the
    others against, the row statistics, and what the timer takes.

    Examples
    --------
    >>> round((backward_bytes(4, 32, 4096, 64, "fp16") - TIMING_BYTES) / 2**30, 3)
    0.879
    """
    tokens = B * H * L * D
    return tokens * (8 * DTYPES[dtype].itemsize + 3 * 4) + 2 * B * H * L * 4 + TIMING_BYTES


ONE_LOOP = "teachkit flash, atomic dQ"
"""The provider that runs the course's backward as FlashAttention-2 does: one loop over key
blocks, ``dQ`` summed by atomic adds (``BackwardConfig.atomic_dq``)."""
DETERMINISTIC = "teachkit flash, deterministic"
"""The provider, on an sm_90 GPU only, that runs the course's backward as it runs under
``torch.use_deterministic_algorithms(True)``: without the Gluon kernel's fused ``dQ``
(:func:`deterministic_config`)."""


def backward_providers() -> dict[str, Attention]:
    """The differentiable attentions the benchmark compares, by name: ``fn(q, k, v, causal)``.
    SDPA's flash backend is FlashAttention-2; its math backend stores the scores;
    :data:`ONE_LOOP` is the course's kernels with FlashAttention-2's loop order; on an sm_90 GPU,
    where ``teachkit flash`` runs dK/dV with the Gluon kernel of
    :mod:`teachkit.kernels.flash_backward_hopper`,
    :data:`~teachkit.bench.attention_problems.TRITON_ONLY` is its Triton kernels alone
    (:func:`triton_config`) and :data:`DETERMINISTIC` the backward without fused ``dQ``."""
    from ..kernels.flash import flash_attention

    table = {f"sdpa {name}": sdpa_backend(name) for name in ("flash", "cudnn", "efficient", "math")}
    table["teachkit flash"] = lambda q, k, v, causal: flash_attention(q, k, v, causal=causal)
    table[ONE_LOOP] = lambda q, k, v, causal: flash_attention(
        q, k, v, causal=causal, backward_config=one_loop_config(q))
    from ..kernels import flash_backward
    from ..kernels.flash_hopper import hopper_device

    if flash_backward.launch_dkdv_hopper is not None and hopper_device():
        table[TRITON_ONLY] = lambda q, k, v, causal: flash_attention(
            q, k, v, causal=causal, backward_config=triton_config(q, causal))
        table[DETERMINISTIC] = lambda q, k, v, causal: flash_attention(
            q, k, v, causal=causal, backward_config=deterministic_config(q, causal))
    return table


def triton_config(q: torch.Tensor, causal: bool) -> BackwardConfig:
    """The backward tiles the table picks for ``q`` (its head dim, dtype and GPU) and the mask,
    with dK/dV (and dQ) on the Triton kernels even where the table runs the Gluon one
    (``kv_hopper``, ``kv_hopper_dq``).

    Examples
    --------
    >>> triton_config(torch.zeros(1, 1, 1, 128), causal=False).kv_hopper
    False
    """
    return _table_config(q, causal)._replace(kv_hopper=False, kv_hopper_dq=False)


def deterministic_config(q: torch.Tensor, causal: bool) -> BackwardConfig:
    """The backward tiles the table picks for ``q`` and the mask, without the Gluon kernel's
    fused ``dQ`` (``kv_hopper_dq``): what ``flash_attention`` runs when
    ``torch.use_deterministic_algorithms(True)`` is on.

    Examples
    --------
    >>> deterministic_config(torch.zeros(1, 1, 1, 128), causal=False).kv_hopper_dq
    False
    """
    return _table_config(q, causal)._replace(kv_hopper_dq=False)


def one_loop_config(q: torch.Tensor) -> BackwardConfig:
    """The backward tiles the table picks for ``q``'s head dim, dtype and GPU, with ``dQ`` by
    atomic adds in the dK/dV loop.

    Examples
    --------
    >>> one_loop_config(torch.zeros(1, 1, 1, 64)).atomic_dq
    True
    """
    return _table_config(q, causal=False)._replace(atomic_dq=True)


def _table_config(q: torch.Tensor, causal: bool) -> BackwardConfig:
    """:func:`~teachkit.kernels.flash_backward.backward_config` for ``q`` on its device."""
    from ..kernels.flash_backward import backward_config

    capability = None if INTERPRETED or q.device.type != "cuda" else compute_capability(q.device)
    return backward_config(q.shape[-1], q.dtype, capability, causal)


def _gradients(fn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               do: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out = fn(q, k, v, causal)
    return torch.autograd.grad(out, (q, k, v), do)


def bench_backward(
    lengths: Iterable[int] = ATTENTION_LENGTHS,
    head_dims: Iterable[int] = (64, 128),
    causal: Iterable[bool] = (False, True),
    dtype: str = "fp16",
    providers: Iterable[str] | None = None,
    math_max_length: int = 4096,
    tokens: int = TOKENS,
    heads: int = HEADS,
    show_progress: bool = True,
) -> list[Measurement]:
    """Time the backward of every provider on every (L = S, D, causal).

    Every provider's gradients are checked against the first provider that runs (itself checked
    against float32 math on one sequence) before its backward is timed on plain launches (a
    CUDA graph cannot capture autograd's bookkeeping). An SDPA backend that refuses a problem
    is skipped (the course's kernel's error is raised), ``sdpa math`` runs only up to
    ``math_max_length``, and a problem that would not fit in the GPU's free memory
    (:func:`backward_bytes`) or runs out of it is skipped with a note.
    """
    table = backward_providers()
    names = require_names(providers, table, "providers")
    problems = attention_problems(lengths, head_dims, causal, dtype, tokens, heads)
    results: list[Measurement] = []
    with progress_bar(len(problems) * len(names), show_progress) as bar:
        for B, L, D, c in problems:
            run_problem(bar, len(names), f"{problem_name(D, L, c)} {dtype} backward",
                        backward_bytes(B, heads, L, D, dtype),
                        lambda B=B, L=L, D=D, c=c: _backward_problem(
                            table, names, B, heads, L, D, c, dtype, math_max_length, results,
                            bar))
        bar.set_description("done")
    return results


def _backward_problem(table: dict[str, Attention], names: list[str], B: int, H: int, L: int,
                      D: int, c: bool, dtype: str, math_max_length: int,
                      results: list[Measurement], bar: object) -> None:
    """Check and time every provider's backward on one problem, appending to ``results``."""
    from ..compare import relative_error

    q, k, v, do = (torch.randn(B, H, L, D, device=DEVICE, dtype=DTYPES[dtype])
                   for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    problem = problem_name(D, L, c)
    ref = None
    for name in each_job(bar, names, lambda n: f"{problem} {n} backward"):
        if name == "sdpa math" and L > math_max_length:
            continue
        fn = table[name]
        with skip_if_out_of_memory(f"{problem} {dtype} {name} backward"):
            try:
                out = fn(q, k, v, c)
            except (RuntimeError, ValueError) as err:
                if is_out_of_memory(err) or not name.startswith("sdpa"):
                    raise  # the course's kernel must take every problem it is given
                continue  # this SDPA backend does not take this problem here
            grads = torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
            if ref is None:  # the first provider that runs is checked against float32 math
                sub = [t.detach()[:1, :2].float().requires_grad_() for t in (q, k, v)]
                want = _gradients(lambda *a: F.scaled_dot_product_attention(
                    *a[:3], is_causal=a[3]), *sub, c, do[:1, :2].float())
                got = [g[:1, :2].float() for g in grads]
                if not all(relative_error(a, b) < 3e-2 for a, b in zip(got, want, strict=True)):
                    raise AssertionError(f"{name} backward is wrong on {problem} (first "
                                         "sequence, 2 heads)")
                ref = [g.float() for g in grads]
            errors = [relative_error(g.float(), r) for g, r in zip(grads, ref, strict=True)]
            if not max(errors) < 3e-2:
                raise AssertionError(f"{name} backward disagrees with the others on {problem}: "
                                     f"{max(errors):.2g}")
            del grads
            ms = time_ms(lambda out=out: torch.autograd.grad(out, (q, k, v), do,
                                                             retain_graph=True),
                         settle_ms=SETTLE_MS)
            del out
            flops = BACKWARD_FLOPS_FACTOR * attention_flops(B, H, L, L, D, c)
            results.append(Measurement(problem, dtype, name, ms, flops / ms / 1e9, "TFLOP/s",
                                       backward_params(D, L, c, dtype)))


def training_memory(lengths: Iterable[int] = (1024, 2048, 4096, 8192, 16384), D: int = 64,
                    heads: int = 8, dtype: str = "fp16",
                    providers: Iterable[str] = ("teachkit flash", "sdpa flash", "sdpa math"),
                    ) -> list[dict]:
    """Peak memory of one forward plus backward beyond the inputs and dO, ``B = 1``, in MiB per
    provider (None where it ran out of memory): linear in ``L`` for the kernels that recompute
    the probabilities, quadratic for ``sdpa math``, which keeps them for the backward.

    On a GPU this is ``torch.cuda.max_memory_allocated``; on a CPU it cannot be measured and
    raises ``RuntimeError``.
    """
    if not ON_GPU:
        raise RuntimeError("training_memory measures CUDA allocations; it needs a GPU")
    table = backward_providers()
    rows = []
    for L in lengths:
        row: dict = {"L": L}
        for name in providers:
            q, k, v, do = (torch.randn(1, heads, L, D, device=DEVICE, dtype=DTYPES[dtype])
                           for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            try:
                grads = _gradients(table[name], q, k, v, False, do)
                torch.cuda.synchronize()
                row[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
                del grads
            except (RuntimeError, torch.OutOfMemoryError):
                row[name] = None
            del q, k, v, do
            torch.cuda.empty_cache()
        rows.append(row)
    return rows
