"""The CuTe DSL kernel timed beside ``teachkit.kernels.softmax`` and ``torch.softmax``.

GB/s = 2 x tensor bytes / time (one read, one write), on the shapes of the Triton softmax
benchmark (:data:`teachkit.bench.softmax.SOFTMAX_SHAPES`), measured with
:func:`teachkit.bench.core.time_ms` and kept with :func:`teachkit.bench.core.save_results` in
the package's records (``teachkit/benchmarks/``) under the name :func:`cute_record_name`
gives, so that a machine without the GPU can show them: read one with
:func:`teachkit.bench.core.load_record`.

Examples
--------
>>> cute_record_name("NVIDIA H100 80GB HBM3")
'cute_softmax_nvidia_h100'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from ..bench.core import Measurement, device_slug
from ..bench.softmax import SOFTMAX_SHAPES, bench_softmax

__all__ = [
    "CUTE_PROVIDER",
    "cute_providers",
    "bench_cute_softmax",
    "cute_record_name",
]

CUTE_PROVIDER = "CuTe DSL kernel"
"""The kernel's name in benchmark tables (the last column, compared with ``torch``)."""


def cute_providers() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """``torch.softmax``, the course's Triton entry point and the CuTe kernel, by name."""
    from ..kernels import softmax as triton_softmax
    from .entry import cute_softmax

    return {
        "torch": lambda x: torch.softmax(x, dim=-1),
        "teachkit.kernels.softmax": triton_softmax,
        CUTE_PROVIDER: cute_softmax,
    }


def bench_cute_softmax(
    shapes: Iterable[tuple[int, int]] = SOFTMAX_SHAPES,
    dtypes: Iterable[str] = ("fp32", "bf16"),
    progress: bool = True,
    graph: bool = False,
) -> list[Measurement]:
    """Time every provider of :func:`cute_providers` on every shape and dtype (GPU only).

    Each output is first checked against ``torch.softmax`` in float32 (relative error below
    ``2e-2``, which any correct bf16 result meets); a wrong one raises ``AssertionError``. A
    problem too large for the GPU's free memory is skipped with a printed note, as in
    :func:`teachkit.bench.softmax.bench_softmax`; ``progress`` draws a progress bar, ``graph``
    times CUDA-graph replays (the GPU's time alone).
    """
    return bench_softmax(shapes, dtypes, progress=progress, table=cute_providers(), graph=graph)


def cute_record_name(device: str = "NVIDIA H100", graph: bool = False) -> str:
    """The name of the record of figures measured on ``device``:
    ``cute_softmax_<slug>``, or ``..._cudagraph`` for CUDA-graph replays (``graph=True``, the
    GPU's time alone); its file is ``teachkit.bench.core.record_path(name, exists=False)``.

    Examples
    --------
    >>> cute_record_name("NVIDIA H100", graph=True)
    'cute_softmax_nvidia_h100_cudagraph'
    """
    return f"cute_softmax_{device_slug(device)}{'_cudagraph' if graph else ''}"
