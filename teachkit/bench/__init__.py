"""Benchmarks of the course's kernels beside PyTorch and the device's own ceilings.

Run from a shell::

    python -m teachkit.bench softmax               # the shapes of the course's softmax table
    python -m teachkit.bench softmax --dtypes bf16 --shapes 4x16777216 64x1048576
    python -m teachkit.bench ceilings              # copy bandwidth and matmul rate only
    python -m teachkit.bench traffic               # notebook 05: bytes moved per formulation, L2
    python -m teachkit.bench attention             # FlashAttention beside each SDPA backend
    python -m teachkit.bench decode                # split-KV and paged decoding
    python -m teachkit.bench host                  # the host's cost of one call, beside torch

Each run measures the ceilings first (a large device-to-device copy for bandwidth, a large
matmul for compute, in bf16 from sm_80 on and fp16 before: :func:`matmul_dtype`), then every
provider on every problem, side by side in one process, and prints a table, with a progress bar
on stderr; ``--plot NAME`` saves a figure to ``figures/NAME.png`` and ``--json PATH`` keeps the
record (the course's own are in ``teachkit/benchmarks/``: :func:`load_record` reads one by name,
:func:`copy_shares` gives its figures as percentages of its copy, :func:`find_records` lists
them). A problem too large for the GPU's free memory is skipped with a
note. Times are medians of CUDA-event timings (``triton.testing.do_bench``), or of CUDA-graph
replays with ``--graph`` (the L2 cache cleared before every call either way). Every result carries
its problem's parameters (``params``, and ``provider_params`` for a parametrised provider):
:class:`Measurement`. On a CPU the kernels run in Triton's interpreter, so times say nothing about
a GPU; the CLI refuses to run there unless given ``--allow-cpu``.

One module per family: :mod:`.core` (timing, ceilings, tables, records), :mod:`.softmax`, and
the others the subcommands name.
"""

from .core import (
                   DTYPES,
                   SETTLE_MS,
                   Measurement,
                   copy_bandwidth,
                   copy_shares,
                   find_records,
                   format_table,
                   load_record,
                   load_results,
                   matmul_dtype,
                   matmul_tflops,
                   progress_bar,
                   record_path,
                   recorded_matmul_dtype,
                   records_dir,
                   refuse_cpu,
                   save_results,
                   time_ms,
                   timing_description,
)
from .softmax import SAME_BYTES_COPY, SOFTMAX_SHAPES, bench_softmax, softmax_providers

__all__ = [
    "DTYPES",
    "Measurement",
    "SETTLE_MS",
    "time_ms",
    "timing_description",
    "copy_bandwidth",
    "matmul_tflops",
    "matmul_dtype",
    "recorded_matmul_dtype",
    "progress_bar",
    "format_table",
    "save_results",
    "load_results",
    "records_dir",
    "record_path",
    "find_records",
    "load_record",
    "copy_shares",
    "refuse_cpu",
    "SOFTMAX_SHAPES",
    "SAME_BYTES_COPY",
    "bench_softmax",
    "softmax_providers",
]
