"""Shared test inputs: fresh random tensors (never zeros), dtypes and tolerances."""

from __future__ import annotations

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)
ALL_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Largest relative error accepted against a float64 reference, per input dtype.
RTOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-6, torch.float64: 1e-12}



def randn(*shape: int, gen: torch.Generator, dtype: torch.dtype = torch.float32,
          scale: float = 1.0) -> torch.Tensor:
    """Standard normal values times ``scale``, drawn in float64 and rounded to ``dtype``."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)
