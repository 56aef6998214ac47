"""The CuTe DSL kernel timed beside ``teachkit.kernels.softmax`` and ``torch.softmax``.

GB/s = 2 x tensor bytes / time (one read, one write), on the shapes of the Triton softmax
benchmark (:data:`teachkit.bench.softmax.SOFTMAX_SHAPES`), measured with
:func:`teachkit.bench.core.time_ms` and kept with :func:`teachkit.bench.core.save_results` as
``teachkit/benchmarks/cute_softmax_<device>.json`` (shipped with the package), so that a machine
without the GPU can show them.

Examples
--------
>>> record_path("NVIDIA H100 80GB HBM3").name
'cute_softmax_nvidia_h100.json'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..bench import core
from ..bench.core import Measurement, device_slug, load_results, records_dir

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable
from ..bench.softmax import SOFTMAX_SHAPES, bench_softmax

__all__ = [
    "BENCHMARKS",
    "CUTE_PROVIDER",
    "cute_providers",
    "bench_cute_softmax",
    "device_slug",
    "record_path",
    "load_record",
]

BENCHMARKS = records_dir()
"""The package's ``teachkit/benchmarks/`` folder, where recorded GPU figures live
(:func:`teachkit.bench.core.records_dir`)."""
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
) -> list[Measurement]:
    """Time every provider of :func:`cute_providers` on every shape and dtype (GPU only).

    Each output is first checked against ``torch.softmax`` in float32 (relative error below
    ``2e-2``, which any correct bf16 result meets); a wrong one raises ``AssertionError``. A
    problem too large for the GPU's free memory is skipped with a printed note, as in
    :func:`teachkit.bench.softmax.bench_softmax`; ``progress`` draws a progress bar.
    """
    return bench_softmax(shapes, dtypes, progress=progress, table=cute_providers())


def record_path(device: str = "NVIDIA H100", graph: bool = False) -> Traversable:
    """Where figures measured on ``device`` are kept (whether or not they exist yet):
    ``teachkit/benchmarks/cute_softmax_<slug>.json``, or ``..._cudagraph.json`` for CUDA-graph
    replays (``graph=True``, the GPU's time alone).

    Examples
    --------
    >>> record_path("NVIDIA H100", graph=True).name
    'cute_softmax_nvidia_h100_cudagraph.json'
    """
    name = f"cute_softmax_{device_slug(device)}{'_cudagraph' if graph else ''}"
    return core.record_path(name, exists=False)


def load_record(path: str | Path | Traversable) -> tuple[list[Measurement], dict] | None:
    """The measurements and the rest of a record (:func:`teachkit.bench.core.load_results`),
    or ``None`` when no such file exists yet.

    Examples
    --------
    >>> load_record(BENCHMARKS / "no_such_record.json") is None
    True
    """
    path = Path(path) if isinstance(path, str) else path
    return load_results(path) if path.is_file() else None
