"""Choosing FlashAttention's tiles by measurement: candidate configurations, a timed sweep, and
the autotuning cache behind ``flash_attention(..., autotune=True)``.

They live in :mod:`teachkit.kernels.flash`, beside the kernel they time and the entry point that
autotunes with them (a module of their own would import the kernel's module and be imported by
it: a cycle). This module keeps their old address:
:func:`~teachkit.kernels.flash.candidate_configs` lists the tiles worth timing on a GPU,
:func:`~teachkit.kernels.flash.sweep` times them on one problem,
:func:`~teachkit.kernels.flash.tuned_config` does so once per kind of problem and remembers the
fastest in :data:`~teachkit.kernels.flash.TUNED`.
"""

from __future__ import annotations

from .flash import TUNED, candidate_configs, sweep, tuned_config

__all__ = ["TUNED", "candidate_configs", "sweep", "tuned_config"]
