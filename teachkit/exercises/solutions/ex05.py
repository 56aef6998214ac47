"""Solutions of the exercises of notebook 05, kept apart from their checkers in
:mod:`teachkit.exercises.ex05`."""

from __future__ import annotations

__all__ = ["solution_safe_traffic", "solution_classify", "solution_time_floor"]


def solution_safe_traffic(M: int, N: int, itemsize: int) -> dict[str, int]:
    """Bytes of the safe three-pass softmax on an ``M x N`` input of ``itemsize``-byte elements.

    Three reads of ``x`` (one per pass) and one write of ``y``; the per-row statistics ``m`` and
    ``d`` are float32: ``m`` is written once and read twice, ``d`` written once and read once.
    """
    x_bytes, stat_bytes = M * N * itemsize, M * 4
    return {"reads": 3 * x_bytes + 3 * stat_bytes, "writes": x_bytes + 2 * stat_bytes}


def solution_classify(flops: float, nbytes: float, tflops: float, gbps: float
                      ) -> tuple[float, str]:
    """Arithmetic intensity ``flops / nbytes`` and the ceiling that limits the kernel.

    The ridge point of the roofline is ``tflops * 1e12 / (gbps * 1e9)`` FLOP per byte: a kernel
    below it finishes its bytes after its FLOPs (memory-bound), one above it the other way round.
    """
    intensity = flops / nbytes
    ridge = tflops * 1e12 / (gbps * 1e9)
    return intensity, "memory" if intensity < ridge else "compute"


def solution_time_floor(M: int, N: int, itemsize: int, gbps: float) -> float:
    """Shortest time of a fused softmax in milliseconds: one read and one write at ``gbps``.

    Nothing can move the ``2 M N itemsize`` bytes faster than the memory's bandwidth, so this
    is a floor for any softmax on that device (only data already in a cache beats it).
    """
    nbytes = 2 * M * N * itemsize
    return nbytes / (gbps * 1e9) * 1e3
