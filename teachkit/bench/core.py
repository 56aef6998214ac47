"""What every benchmark shares: timing, the device's ceilings, tables, JSON records, progress bars.

Times are medians of CUDA-event timings (``triton.testing.do_bench``, the L2 cache cleared before
each call) on a GPU, or of CUDA-graph replays, cleared alike, when a benchmark is asked for them
(``graph=True``, the CLI's ``--graph``: the GPU's time without the host's); on a CPU a wall
clock, which says nothing about a GPU.

A :class:`Measurement` names its problem and provider by parameters, as
``triton.testing.Benchmark`` keys its results by ``x_names`` and ``line_vals``: ``params`` (the
problem's, e.g. ``{"B": 8, "S": 16384, "dtype": "float16"}``) and ``provider_params`` (a
parametrised provider's, e.g. ``{"num_splits": 8, "block_n": 64}``). Its ``problem`` and
``provider`` strings are labels for tables and legends; nothing reads them back.

Records measured on GPUs ship with the package in ``teachkit/benchmarks/`` (one JSON file per
record, named like ``softmax_nvidia_h100.json``): :func:`records_dir` is that folder,
:func:`load_record` reads one by name and :func:`find_records` lists them.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..device import (
    DEVICE,
    ON_GPU,
    compute_capability,
    describe,
    device_name,
    fits_or_skip,
    memory_budget,
    skip_if_out_of_memory,
)
from ..progress import each_job, progress_bar
from ..validation import require_positive_int

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "DTYPES",
    "Measurement",
    "time_ms",
    "timing_description",
    "SETTLE_MS",
    "TIMING_BYTES",
    "copy_bandwidth",
    "matmul_dtype",
    "dtype_name",
    "recorded_matmul_dtype",
    "matmul_tflops",
    "progress_bar",
    "each_job",
    "run_problem",
    "format_table",
    "device_slug",
    "records_dir",
    "record_path",
    "find_records",
    "load_record",
    "save_results",
    "load_results",
    "refuse_cpu",
    "add_common_arguments",
    "positive_int",
    "power_of_two",
    "writable_path",
    "require_names",
    "require_sizes",
    "require_dtype_name",
    "start",
    "finish",
]

Param = int | float | bool | str
"""A parameter's value in a record: what JSON keeps as it is."""

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Measurement:
    """One timed provider on one problem.

    Attributes
    ----------
    problem, dtype, provider : str
        Labels for tables and legends (``"B=8 S=16384"``, ``"fp16"``, ``"teachkit split-KV"``);
        read nothing from them: the parameters are in ``params`` and ``provider_params``.
    ms : float
        The median time of one call.
    value : float
        The figure of merit, in ``unit`` (GB/s, TFLOP/s, ...).
    unit : str
        What ``value`` counts.
    params : dict
        The problem's parameters, as ``triton.testing.Benchmark``'s ``x_names`` name them, with
        its dtype's torch name: ``{"rows": 16384, "cols": 1024, "dtype": "float32"}``.
    provider_params : dict
        A parametrised provider's parameters (empty for the others): a split sweep's
        ``{"num_splits": 8, "block_n": 64}``.
    """

    problem: str
    dtype: str
    provider: str
    ms: float
    value: float
    unit: str
    params: dict[str, Param]
    provider_params: dict[str, Param] = field(default_factory=dict)


SETTLE_MS = 1000
"""How long the attention benchmarks run a provider, each call after the L2 cache is cleared as
in the timing that follows, before they time it (``time_ms(..., settle_ms=SETTLE_MS)``).
Tensor-core work drives an H100 to its power limit, and the driver then lowers the SM clock over
the first few hundred milliseconds: from an idle start, a kernel runs faster in its first 25 ms
than a second later (``gpu_checks/power_gpu.py --settle``, notebook 08). Timed without this, a
provider would be measured at a clock it does not keep, set by how long the GPU idled before
it and by what ran then."""


def time_ms(fn: Callable[[], object], warmup: int = 25, rep: int = 100,
            graph: bool = False, warm_l2: bool = False, settle_ms: int = 0) -> float:
    """Median time of ``fn()`` in milliseconds: CUDA events on a GPU, a wall clock on a CPU.

    ``warmup`` and ``rep`` are milliseconds of warm-up and measurement on a GPU (as
    ``triton.testing.do_bench`` takes them) and call counts on a CPU. ``settle_ms`` (GPU only)
    first runs what is timed for that long, each call after the L2 cache is cleared as in the
    timing: :data:`SETTLE_MS` times a compute-bound kernel at the clock it keeps. On a GPU:

    - plain launches (the default) are timed by ``triton.testing.do_bench``, which clears the
      L2 cache before every call, so the data comes from HBM and the host's launch counts
      wherever the GPU waits for it;
    - with ``graph``, one call is captured in a CUDA graph and each replay is timed after the
      same clearing of the L2 cache: the GPU's time alone, with the data still coming from HBM,
      so plain and graph timings differ by the host's time only;
    - with ``graph`` and ``warm_l2``, back-to-back calls are captured and their replays timed
      without clearing anything (``triton.testing.do_bench_cudagraph``): a working set that
      fits in L2 is then read from L2 (:func:`teachkit.traffic.warm_time_ms`).

    ``graph`` and ``warm_l2`` mean nothing on a CPU.

    Raises
    ------
    ValueError
        ``warm_l2`` without ``graph``.
    """
    if warm_l2 and not graph:
        raise ValueError("warm_l2=True times back-to-back CUDA-graph replays; pass graph=True "
                         "with it (plain launches always clear the L2 cache)")
    if ON_GPU:
        import triton.testing

        if graph:
            fn()  # compile outside the capture
            if warm_l2:
                return float(triton.testing.do_bench_cudagraph(fn, rep=rep,
                                                               return_mode="median"))
            replay = _captured(fn)
            _settle(replay, settle_ms)
            return float(triton.testing.do_bench(replay, warmup=warmup, rep=rep,
                                                 return_mode="median"))
        _settle(fn, settle_ms)
        return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
    fn()
    times = []
    for _ in range(max(3, min(rep, 10))):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def interleaved_rounds(names: Iterable[str], rounds: int) -> Iterator[str]:
    """Each of ``names`` once a round for ``rounds`` rounds, in their order and then in the
    reverse order, turn about: timed in this order, a slow spell of the GPU or the host falls on
    all of them alike, and none is always timed first.

    Examples
    --------
    >>> list(interleaved_rounds(["a", "b", "c"], 3))
    ['a', 'b', 'c', 'c', 'b', 'a', 'a', 'b', 'c']
    """
    names = list(names)
    for r in range(rounds):
        yield from (names if r % 2 == 0 else reversed(names))


def _settle(fn: Callable[[], object], ms: int) -> None:
    """Call ``fn`` for ``ms`` milliseconds, each call after the L2 cache is cleared the way
    ``triton.testing.do_bench`` clears it, ten calls queued at a time."""
    if ms <= 0:
        return
    from triton.runtime import driver

    cache = driver.active.get_empty_cache_for_benchmark()
    stop = time.perf_counter() + ms / 1e3
    while time.perf_counter() < stop:
        for _ in range(10):
            driver.active.clear_cache(cache)
            fn()
        torch.cuda.synchronize()
    del cache


def _captured(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn``'s work captured once in a CUDA graph (on a side stream, as capture needs); returns
    the graph's ``replay``."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # the side stream's first call outside the capture (its own buffers, lazy state)
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graph.replay


def timing_description(graph: bool = False, warm_l2: bool = False,
                       settle_ms: int = 0) -> str:
    """How :func:`time_ms` timed on this machine, as a record's ``timing`` says it; with
    ``settle_ms`` (on a GPU), also how long each provider ran before it was timed.

    Examples
    --------
    >>> timing_description(graph=True) in (
    ...     "cuda-graph replays, L2 cleared before each", "wall clock median (CPU)")
    True
    """
    if not ON_GPU:
        return "wall clock median (CPU)"
    if graph:
        how = ("cuda-graph replays of back-to-back calls, L2 warm" if warm_l2
               else "cuda-graph replays, L2 cleared before each")
    else:
        how = "do_bench median (CUDA events)"
    return how if not settle_ms else f"{how}, each after {settle_ms} ms of such calls untimed"


TIMING_BYTES = 256 * 10**6 if ON_GPU else 0
"""GPU memory :func:`time_ms` takes beside a problem: the buffer ``triton.testing.do_bench``
writes to flush the L2 cache before every call (256 MB). Add it to a problem's estimate."""


def copy_bandwidth(nbytes: int | None = None) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written.

    ``nbytes`` defaults to 1 GiB on a GPU (far beyond any L2), less where the GPU has less
    free (a quarter of :func:`teachkit.device.memory_budget`, at least 64 MiB: source and
    destination then take half of it), and 64 MiB on a CPU. Always timed with plain launches,
    even where a benchmark times CUDA-graph replays: back-to-back copies captured in one CUDA
    graph (``triton.testing.do_bench_cudagraph``) ran at 2441 GB/s on an H100 against 2991
    launched plainly (a graph records each as a memcpy node), and a 1 GiB copy has no launch
    overhead to hide anyway.
    """
    if not nbytes:
        budget = max(0, memory_budget() - TIMING_BYTES)
        nbytes = max(1 << 26, min(1 << 30, budget // 4)) if ON_GPU else 1 << 26
    nbytes -= nbytes % 4
    src = torch.randn(nbytes // 4, device=DEVICE)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), graph=False)
    return 2 * nbytes / ms / 1e6


def announce_copy_bandwidth() -> float:
    """Print which world this is (:func:`teachkit.device.describe`) and this machine's
    :func:`copy_bandwidth`, as the GPU scripts begin; return the bandwidth in GB/s."""
    print(describe())
    copy = copy_bandwidth()
    print(f"copy bandwidth: {copy:.0f} GB/s")
    return copy


def matmul_dtype(capability: tuple[int, int] | None = None) -> torch.dtype:
    """The dtype :func:`matmul_tflops` times: the fastest tensor-core type the GPU has.

    bfloat16 from compute capability 8.0 (Ampere) on, float16 before it (a T4, sm_75, has no
    bf16 tensor cores: bf16 would be emulated and measure nothing useful), float32 on a CPU.
    ``capability`` defaults to this machine's GPU (a CPU when there is none).

    Examples
    --------
    >>> matmul_dtype((9, 0)), matmul_dtype((7, 5))
    (torch.bfloat16, torch.float16)
    """
    if capability is None:
        if not ON_GPU:
            return torch.float32
        capability = compute_capability()
    return torch.bfloat16 if tuple(capability) >= (8, 0) else torch.float16


def dtype_name(dtype: torch.dtype) -> str:
    """How records name a dtype: ``'bfloat16'`` for ``torch.bfloat16``.

    Examples
    --------
    >>> dtype_name(torch.float16)
    'float16'
    """
    return str(dtype).removeprefix("torch.")


def recorded_matmul_dtype(record: dict) -> str:
    """The dtype a record's ``matmul_tflops`` ceiling was timed in (``ceilings.matmul_dtype``).

    Records written before the key existed were all measured on an H100 in bfloat16, so a
    missing one reads ``'bfloat16'``.

    Examples
    --------
    >>> recorded_matmul_dtype({"ceilings": {"matmul_tflops": 743.5}})
    'bfloat16'
    >>> recorded_matmul_dtype({"ceilings": {"matmul_tflops": 65.0, "matmul_dtype": "float16"}})
    'float16'
    """
    return str(record.get("ceilings", {}).get("matmul_dtype", "bfloat16"))


def matmul_tflops(n: int | None = None, dtype: torch.dtype | None = None) -> float:
    """Rate of an ``n x n x n`` matmul on random data, in TFLOP/s.

    ``dtype`` defaults to :func:`matmul_dtype` (bf16 from sm_80 on, fp16 before, float32 on a
    CPU). ``n`` defaults to 8192 on a GPU (halved until the three matrices fit in a quarter of
    :func:`teachkit.device.memory_budget`) and 1024 on a CPU.
    """
    dtype = matmul_dtype() if dtype is None else dtype
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype (e.g. torch.bfloat16), got "
                        f"{dtype!r}")
    if n is not None:
        require_positive_int(n, "n")
    size = dtype.itemsize
    if not n:
        n = 8192 if ON_GPU else 1024
        room = (memory_budget() - TIMING_BYTES) / 4 if ON_GPU else 0
        while ON_GPU and n > 1024 and 3 * n * n * size > room:
            n //= 2
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    ms = time_ms(lambda: a @ b, settle_ms=SETTLE_MS)  # at the clock it keeps
    return 2 * n**3 / ms / 1e9


def run_problem(bar: object, jobs: int, label: str, nbytes: int, run: Callable[[], None]) -> None:
    """Run one problem of a benchmark loop: ``run()``, unless its ``nbytes`` do not fit in the
    GPU's free memory (:func:`teachkit.device.fits_or_skip`) or it runs out of memory
    (:func:`teachkit.device.skip_if_out_of_memory`), each skipped with a printed note naming
    ``label``. ``bar`` (:func:`progress_bar`) counts the problem's ``jobs`` either way, however
    many of them ``run`` counted itself.
    """
    done = bar.n
    if fits_or_skip(nbytes, label):
        with skip_if_out_of_memory(label):
            run()
    bar.update(done + jobs - bar.n)


def format_table(results: list[Measurement], ceiling: float | None = None,
                 baseline: str | tuple[str, ...] = "torch", device: str | None = None,
                 subject: str | None = None) -> str:
    """A Markdown table: one row per (problem, dtype), one column per provider, then the ratio of
    ``subject`` (default: the last provider) to each ``baseline`` provider present and to
    ``ceiling``. ``device`` names where the results were measured (default: this machine). Rows
    and columns are headed by the results' labels."""
    providers = list(dict.fromkeys(r.provider for r in results))
    keys = list(dict.fromkeys((r.problem, r.dtype) for r in results))
    unit = results[0].unit if results else ""
    last = subject if subject in providers else (providers[-1] if providers else "")
    bases = [b for b in ((baseline,) if isinstance(baseline, str) else baseline)
             if b in providers and b != last]
    head = ["problem", "dtype", *providers, *(f"{last} / {b}" for b in bases)]
    if ceiling:
        head.append(f"{last} / ceiling")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for problem, dtype in keys:
        got = {r.provider: r.value for r in results if (r.problem, r.dtype) == (problem, dtype)}
        cells = [problem, dtype] + [f"{got[p]:.0f}" if p in got else "-" for p in providers]
        for b in bases:
            cells.append(f"{got[last] / got[b]:.2f}x" if last in got and b in got else "-")
        if ceiling:
            cells.append(f"{got[last] / ceiling:.0%}" if last in got else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return f"({unit}, {device or device_name()})\n" + "\n".join(lines)


def device_slug(name: str) -> str:
    """A file-name form of a device name, its first two words (letters and digits):
    ``'nvidia_h100'``.

    Examples
    --------
    >>> device_slug("NVIDIA H200"), device_slug("NVIDIA H100 80GB HBM3")
    ('nvidia_h200', 'nvidia_h100')
    >>> device_slug("NVIDIA A100-SXM4-80GB"), device_slug("CPU (Triton interpreter)")
    ('nvidia_a100', 'cpu_triton')
    """
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()[:2]
    return "_".join(words) if words else "unknown"


RECORD_SUFFIX = ".json"


def records_dir() -> Traversable:
    """The folder of recorded benchmarks, ``teachkit/benchmarks/``, shipped with the package.

    A ``Traversable`` (``importlib.resources``); in a normal or editable install it is a
    ``pathlib.Path``. Its records are read with :func:`load_record`.
    """
    return importlib.resources.files("teachkit") / "benchmarks"


def find_records(prefix: str = "") -> list[str]:
    """Names (without ``.json``) of the records whose name starts with ``prefix``, sorted.

    Examples
    --------
    >>> "softmax_nvidia_h100" in find_records("softmax_")
    True
    """
    folder = records_dir()
    if not folder.is_dir():
        return []
    return sorted(f.name.removesuffix(RECORD_SUFFIX) for f in folder.iterdir()
                  if f.name.endswith(RECORD_SUFFIX) and f.name.startswith(prefix))


def record_path(name: str, exists: bool = True) -> Traversable:
    """Where the record ``name`` (``"softmax_nvidia_h100"``, with or without ``.json``) lives.

    Parameters
    ----------
    name : str
        The record's file name in :func:`records_dir`; not a path.
    exists : bool
        True: the record must exist (a ``FileNotFoundError`` naming those that do otherwise).
        False: where a new record of that name goes (for scripts that write one).
    """
    if not name or "/" in name or "\\" in name:
        raise ValueError(f"a record is named by its file name, e.g. 'softmax_nvidia_h100', not "
                         f"{name!r}; read a file elsewhere with load_results(path)")
    stem = name.removesuffix(RECORD_SUFFIX)
    path = records_dir() / (stem + RECORD_SUFFIX)
    if exists and not path.is_file():
        available = ", ".join(find_records()) or "none"
        raise FileNotFoundError(f"no benchmark record named {stem!r} in teachkit/benchmarks; "
                                f"available: {available}")
    return path


def load_record(name: str) -> tuple[list[Measurement], dict]:
    """Read a shipped record by name: :func:`load_results` of :func:`record_path`.

    Examples
    --------
    >>> results, record = load_record("softmax_nvidia_h100")
    >>> record["device"].startswith("NVIDIA H100")
    True
    """
    return load_results(record_path(name))


def copy_shares(name: str) -> tuple[dict[tuple[str, str], dict[str, float]], dict]:
    """A shipped record's figures as percentages of the copy bandwidth it measured
    (``record["ceilings"]["copy_gbps"]``): ``{(problem, dtype): {provider: %}}`` in the
    record's order, and the record (:func:`load_record`).

    Examples
    --------
    >>> shares, record = copy_shares("softmax_resident_tma_nvidia_h100")
    >>> 90 < shares["256x262144", "fp32"]["entry point"] < 100
    True
    """
    results, record = load_record(name)
    copy_gbps = record["ceilings"]["copy_gbps"]
    shares: dict[tuple[str, str], dict[str, float]] = {}
    for r in results:
        shares.setdefault((r.problem, r.dtype), {})[r.provider] = 100 * r.value / copy_gbps
    return shares, record


def save_results(path: str | Path, results: list[Measurement],
                 extra: dict | None = None, *, timing: str | None = None,
                 **ceilings: float | str) -> Path:
    """Write results, the device's name and measured ceilings (e.g. ``copy_gbps=2998``,
    ``matmul_dtype="bfloat16"``) as JSON, so a notebook on a machine without that GPU can show
    the figures measured on it; ``extra`` adds top-level entries (e.g. ``{"memory": rows}``).
    ``timing`` says how the results were timed (default :func:`timing_description` of plain
    launches; ``timing_description(graph=True)`` for CUDA-graph replays). Each result keeps its
    ``params`` and ``provider_params``.
    The course's records go to ``record_path(name, exists=False)``
    (``teachkit/benchmarks/<name>.json``)."""
    import triton

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "device": device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "timing": timing_description() if timing is None else timing,
        "ceilings": ceilings,
        "results": [dataclasses.asdict(r) for r in results],
        **(extra or {}),
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load_results(path: str | Path | Traversable) -> tuple[list[Measurement], dict]:
    """Read what :func:`save_results` wrote at ``path``: the measurements and the rest of the
    record. A shipped record is read by name with :func:`load_record`.

    Raises ``ValueError`` for a record whose results have no ``params`` (written before
    measurements carried their parameters): run its benchmark again.
    """
    source = Path(path) if isinstance(path, str) else path
    record = json.loads(source.read_text())
    rows = record.pop("results")
    if any("params" not in r for r in rows):
        raise ValueError(f"{source}: results without params (an old record); run its "
                         "benchmark again to write one that has them")
    return [Measurement(**r) for r in rows], record


def refuse_cpu(allow_cpu: bool) -> bool:
    """True (after saying why on stderr) when a benchmark should not run: no GPU and no
    ``--allow-cpu``. Under Triton's interpreter the times say nothing about a GPU."""
    if ON_GPU or allow_cpu:
        return False
    print("No CUDA GPU: the kernels would run in Triton's interpreter. Pass --allow-cpu "
          "to run anyway (with small sizes).", file=sys.stderr)
    return True


def positive_int(text: str) -> int:
    """An ``argparse`` type: an int of 1 or more (lengths, batches, heads, page sizes, splits).

    Examples
    --------
    >>> positive_int("8")
    8
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; pass 1 or "
                                         "more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive; pass 1 or more")
    return value


def power_of_two(text: str) -> int:
    """An ``argparse`` type: a power of two (Triton tile sizes and warp counts)."""
    value = positive_int(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"{value} is not a power of two; pass e.g. "
                                         f"{1 << (value.bit_length() - 1)}")
    return value


def writable_path(text: str) -> Path:
    """An ``argparse`` type for an output file: refused at once if it names a folder, or a file
    or folder that cannot be written, so a benchmark does not run for nothing. Missing parent
    folders are fine where they can be created."""
    path = Path(text)
    if not text or path.is_dir() or text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; pass a file path, e.g. "
                                         f"{os.path.join(text or '.', 'results.json')}")
    parent = path.parent
    while not parent.exists():  # the first folder that exists must let us create the rest
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: {str(parent)!r} is a file, not a folder")
    try:  # really try (permission bits do not stop root, yet /proc or a read-only mount do)
        if path.exists():
            with open(path, "a"):
                pass
        else:
            tempfile.TemporaryFile(dir=parent).close()
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written ({err.strerror}); pass a "
                                         "path you can write") from None
    return path


def require_names(given: Iterable[str] | None, valid: Iterable[str], what: str,
                  allow_empty: bool = False) -> list[str]:
    """``given`` as a list (every name of ``valid`` when ``None``), or ``ValueError`` naming the
    unknown ones and listing the valid ones (or saying it is empty, unless ``allow_empty``).

    Examples
    --------
    >>> require_names(None, ["torch", "fused"], "providers")
    ['torch', 'fused']
    """
    valid = list(valid)
    if given is None:
        return valid
    if isinstance(given, str):
        raise TypeError(f"{what} must be a list of names, got the string {given!r}; pass "
                        f"[{given!r}]")
    given = list(given)
    unknown = [n for n in given if n not in valid]
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; choose from {valid}")
    if not given and not allow_empty:
        raise ValueError(f"{what} is empty; choose at least one of {valid}")
    return given


def require_sizes(values: Iterable[int], name: str) -> list[int]:
    """``values`` as a list, each a positive int, or ``TypeError``/``ValueError`` naming
    ``name[i]``."""
    if isinstance(values, (str, int)):
        raise TypeError(f"{name} must be a list of ints, got {type(values).__name__} {values!r}")
    values = list(values)
    for i, value in enumerate(values):
        require_positive_int(value, f"{name}[{i}]")
    return values


def require_dtype_name(dtype: object) -> str:
    """``dtype`` if it names one of :data:`DTYPES`, else ``ValueError`` listing them."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    return dtype


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options every benchmark takes: ``--plot``, ``--json``, ``--graph`` and
    ``--allow-cpu``. ``--json`` is checked when parsed (:func:`writable_path`), before anything
    runs."""
    parser.add_argument("--plot", default=None, help="save a figure as figures/PLOT.png")
    parser.add_argument("--json", default=None, type=writable_path,
                        help="save the results as JSON to this path (the course keeps its "
                             "records in teachkit/benchmarks/<name>.json)")
    parser.add_argument("--graph", action="store_true",
                        help="time CUDA-graph replays, the L2 cache cleared before each as "
                             "before plain launches: the GPU's time without the host's")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on a CPU (interpreter: tiny sizes, meaningless times)")


def finish(args: argparse.Namespace, results: list[Measurement],
           figure: Callable[[], object] | None = None, extra: dict | None = None,
           timing: str | None = None, **ceilings: float | str) -> None:
    """Do what the common options ask once a benchmark has run: ``--json`` saves the results
    with ``extra`` and the ``ceilings`` (:func:`save_results`, timed as ``timing`` says, by
    default as ``--graph`` and ``--settle`` say), ``--plot`` saves ``figure()`` under
    ``figures/``; each says where."""
    if args.json:
        if timing is None:
            timing = timing_description(args.graph, settle_ms=getattr(args, "settle_ms", 0))
        path = save_results(args.json, results, extra, timing=timing, **ceilings)
        print(f"results: {path}")
    if args.plot and figure is not None:
        from ..plots.figures import save_figure

        print(f"figure: {save_figure(figure(), args.plot)}")


def start(args: argparse.Namespace) -> bool:
    """False, after saying why, when the benchmark should not run (no GPU and no
    ``--allow-cpu``, or a ``--plot`` that cannot be written). ``--graph`` is not applied here:
    a benchmark passes ``graph=args.graph`` down to what it times, and :func:`finish` to the
    record."""
    if getattr(args, "plot", None):  # checked now, not after the benchmark has run
        from ..plots.figures import figures_dir

        try:
            writable_path(str(figures_dir() / f"{args.plot}.png"))
        except argparse.ArgumentTypeError as err:
            print(f"--plot: {err}", file=sys.stderr)
            return False
    return not refuse_cpu(args.allow_cpu)
