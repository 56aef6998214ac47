"""Choosing FlashAttention's tiles by measurement: candidate configurations, a timed sweep, and
the autotuning cache behind ``flash_attention(..., autotune=True)``.

Four numbers set how the kernel runs: ``BLOCK_M`` query rows per program (more rows reuse each
loaded key block more often), ``BLOCK_N`` keys per step (larger steps mean fewer rescalings and
longer matrix products, but more registers and shared memory), ``num_warps`` (the threads that share
a tile) and ``num_stages`` (how many key/value blocks the compiler prefetches while the current one
is used). The best choice depends on the GPU, the head dim, the dtype and the mask, so the course
keeps a measured table (:func:`teachkit.kernels.flash.flash_config`) and this module can redo the
measurement on any GPU.

Under Triton's interpreter there is one small candidate: timings there say nothing about a GPU.
"""

from __future__ import annotations

import torch

from ..device import INTERPRETED, compute_capability
from .flash import FlashConfig, flash_config, launch

__all__ = ["candidate_configs", "sweep", "tuned_config", "TUNED"]

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
    from .targets import SHARED_MEMORY_LIMIT

    cap = capability[0] * 10 + capability[1]
    limit = max(v for c, v in SHARED_MEMORY_LIMIT.items() if c <= cap) if cap >= 75 else 48 * 1024
    size = torch.tensor([], dtype=dtype).element_size()
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
        As for :func:`teachkit.kernels.flash_attention` (validated there first).
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
    from .flash import _validate

    _validate(q, k, v)
    D = q.shape[-1]
    scale = D ** -0.5 if scale is None else float(scale)
    cap = None if INTERPRETED else compute_capability(q.device)
    configs = configs if configs is not None else candidate_configs(D, q.dtype, cap)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    if INTERPRETED:
        return [(cfg, None) for cfg in configs]
    import triton.testing

    from ..bench.core import each_job, progress_bar

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
