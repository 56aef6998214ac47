"""``python -m teachkit.bench softmax|ceilings``: the softmax kernels beside ``torch.softmax``.

GB/s = 2 x tensor bytes / time (one read, one write): the figure to hold against the copy
bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

import torch

from ..device import DEVICE, ON_GPU, device_name, skip_if_out_of_memory
from . import core
from .core import (
    DTYPES,
    SETTLE_MS,
    Measurement,
    add_common_arguments,
    copy_bandwidth,
    dtype_name,
    finish,
    format_table,
    matmul_dtype,
    matmul_tflops,
    start,
    time_ms,
)

__all__ = ["SOFTMAX_SHAPES", "SAME_BYTES_COPY", "RESIDENT_F2F", "softmax_providers",
           "softmax_bytes", "softmax_params", "time_cut_to_chunks", "time_softmax_provider",
           "time_softmax_providers", "bench_softmax", "main"]

SOFTMAX_SHAPES = [(16384, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (256, 262144),
                  (64, 1048576), (4, 16777216)]
"""Rows x columns of the softmax benchmark, from many short rows to few long: 2**24, 2**25 and
then 2**26 elements (16M, 32M, 64M), so the shortest rows are also the smallest problems."""


SAME_BYTES_COPY = "copy, same bytes"
"""The provider that copies the input into a new tensor (``torch.clone``): one read and one
write of the same bytes as a softmax and no arithmetic, the yardstick for a problem of that
size, its launch and the GPU's ramp up and down included. The copy ceiling
(:func:`copy_bandwidth`) is measured on 1 GiB, where those cost nothing; a problem of 32 MB
reaches less, by copy or by softmax."""

RESIDENT_F2F = "resident rows, F2F"
"""The provider that runs 16-bit resident rows as :func:`~teachkit.kernels.softmax` does but
rounds each result with an instruction of its own (``cvt_x2=False``), not two to one
(:func:`~teachkit.kernels.softmax_kernels.pack_halves_x2`): what one ``cvt.rn.bf16x2.f32``
instead of two ``F2F`` conversions buys, timed in the same run."""

PROVIDERS = ("torch", "blog kernel", "online (tl.reduce)", "fused", "split rows",
             "resident rows", RESIDENT_F2F, "teachkit.kernels.softmax", SAME_BYTES_COPY)
"""The names of :func:`softmax_providers`, in order."""


def softmax_providers() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The softmax implementations the benchmark compares, by name."""
    from ..kernels import softmax_kernels as ks

    return {
        "torch": lambda x: torch.softmax(x, dim=-1),
        "blog kernel": ks.softmax_blog,
        "online (tl.reduce)": ks.softmax_online,
        "fused": ks.softmax_fused,
        "split rows": ks.softmax_split,
        "resident rows": ks.softmax_resident,
        RESIDENT_F2F: lambda x: ks.softmax_resident(
            x, config=ks.RESIDENT_CONFIGS[x.element_size()]._replace(cvt_x2=False)),
        "teachkit.kernels.softmax": ks.softmax,
        SAME_BYTES_COPY: torch.clone,
    }


def softmax_bytes(rows: int, cols: int, dtype: str) -> int:
    """GPU memory one softmax problem of :func:`bench_softmax` takes at its peak: the input, a
    provider's output and the float32 reference (an input copy and its softmax), plus what the
    timer takes (:data:`teachkit.bench.core.TIMING_BYTES`).

    Examples
    --------
    >>> softmax_bytes(1024, 1024, "bf16") - core.TIMING_BYTES  # (2 + 2 + 4 + 4) bytes a value
    12582912
    """
    size = DTYPES[dtype].itemsize
    return rows * cols * (2 * size + 8) + core.TIMING_BYTES


def softmax_params(rows: int, cols: int, dtype: str) -> dict[str, int | str]:
    """The parameters of one softmax problem, as its :class:`Measurement` keeps them.

    Examples
    --------
    >>> softmax_params(16384, 1024, "fp32")
    {'rows': 16384, 'cols': 1024, 'dtype': 'float32'}
    """
    return {"rows": rows, "cols": cols, "dtype": dtype_name(DTYPES[dtype])}


def bench_softmax(
    shapes: Iterable[tuple[int, int]] = SOFTMAX_SHAPES,
    dtypes: Iterable[str] = ("fp32", "bf16"),
    providers: Iterable[str] | None = None,
    progress: bool = True,
    table: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    graph: bool = False,
) -> list[Measurement]:
    """Time every softmax provider (of ``table``, default :func:`softmax_providers`, which
    includes a copy of the same bytes, :data:`SAME_BYTES_COPY`) on every shape and dtype;
    GB/s = 2 x tensor bytes / time. Each :class:`Measurement` has the
    problem's :func:`softmax_params`; ``graph`` times CUDA-graph replays
    (:func:`teachkit.bench.core.time_ms`).

    A provider that cannot take a shape (the fused kernel on rows longer than it holds) is
    skipped, and so, with a printed note, is a problem larger than the GPU's free memory
    (:func:`softmax_bytes`) or one that runs out of it. Outputs are checked against
    ``torch.softmax`` before timing. ``progress`` draws a progress bar naming the current job.
    """
    from ..kernels.softmax_kernels import FUSED_MAX_COLS, resident_fits

    table = softmax_providers() if table is None else table
    names = core.require_names(providers, table, "providers")
    shapes = [tuple(core.require_sizes(shape, "shape")) for shape in shapes]
    if any(len(shape) != 2 for shape in shapes):
        raise ValueError(f"shapes must be (rows, cols) pairs, got {shapes}")
    dtypes = [core.require_dtype_name(d) for d in dtypes]
    problems = [(s, d) for s in shapes for d in dtypes]
    results: list[Measurement] = []
    with core.progress_bar(len(problems) * len(names), progress) as bar:
        for (rows, cols), dt in problems:
            label = f"{rows}x{cols} {dt}"

            def run(rows: int = rows, cols: int = cols, dt: str = dt, label: str = label) -> None:
                x = torch.randn(rows, cols, device=DEVICE, dtype=DTYPES[dt])
                for name in core.each_job(bar, names, lambda n: f"{label} {n}"):
                    if name == "fused" and cols > FUSED_MAX_COLS:
                        continue  # the row does not fit in one program's registers
                    if name in ("resident rows", RESIDENT_F2F) and (
                            cols <= FUSED_MAX_COLS
                            or not resident_fits(cols, x.dtype, x.device.index or 0)):
                        continue  # a short row, or one whose chunks do not fit on chip at once
                    if name == RESIDENT_F2F and x.element_size() != 2:
                        continue  # float32 rows are not kept as words
                    with skip_if_out_of_memory(f"{label} {name}"):
                        results.append(time_softmax_provider(name, table[name], x, dt, graph))

            core.run_problem(bar, len(names), label, softmax_bytes(rows, cols, dt), run)
        bar.set_description("done")
    return results


def time_softmax_provider(name: str, fn: Callable[[torch.Tensor], torch.Tensor],
                          x: torch.Tensor, dtype: str, graph: bool = False,
                          tolerance: float = 2e-2, settle_ms: int = 0) -> Measurement:
    """Check one provider ``fn`` on the rows ``x`` (of the dtype named ``dtype``) against
    ``torch.softmax`` in float32 (:data:`SAME_BYTES_COPY` against ``x`` itself), then time it
    (:func:`teachkit.bench.core.time_ms`, CUDA-graph replays with ``graph``, after
    ``settle_ms`` of untimed calls): a
    :class:`Measurement` of GB/s = 2 x tensor bytes / time with the problem's
    :func:`softmax_params`.

    Raises ``AssertionError`` naming the provider and the problem when the relative error is
    not below ``tolerance``.
    """
    from ..compare import relative_error

    problem = f"{x.shape[0]}x{x.shape[1]}"
    want = x if name == SAME_BYTES_COPY else torch.softmax(x.float(), dim=-1)
    err = relative_error(fn(x), want)
    if not err < tolerance:
        raise AssertionError(f"{name} is wrong on {problem} {dtype}: relative error {err}")
    ms = time_ms(lambda: fn(x), graph=graph, settle_ms=settle_ms)
    gbps = 2 * x.numel() * x.element_size() / ms / 1e6
    return Measurement(problem, dtype, name, ms, gbps, "GB/s",
                       softmax_params(x.shape[0], x.shape[1], dtype))


def time_cut_to_chunks(name: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                       chunk: int, dtype: str) -> Measurement:
    """:func:`time_softmax_provider` of ``fn`` on ``x`` viewed as rows of ``chunk`` columns
    (checked against a softmax of each chunk, not of ``x``'s rows), recorded under ``x``'s
    problem with ``name``: a resident kernel run so reads, holds and writes the same bytes as
    on ``x`` but waits for no other program, its row's only pair being its own, so the gap to
    its figure on ``x`` is what the exchange costs (``gpu_checks/resident_long_gpu.py`` and
    ``resident_tma_gpu.py``, ``--unexchanged``). ``chunk`` must divide ``x``'s row length."""
    import dataclasses

    rows, cols = x.shape
    if cols % chunk:
        raise ValueError(f"chunk = {chunk} does not divide rows of {cols} columns; pass a "
                         "divisor")
    cut = time_softmax_provider(name, fn, x.view(-1, chunk), dtype, tolerance=1e-2)
    return dataclasses.replace(cut, problem=f"{rows}x{cols}",
                               params=softmax_params(rows, cols, dtype))


def time_softmax_providers(providers: dict[str, Callable[[torch.Tensor], torch.Tensor]],
                           x: torch.Tensor, dtype: str, copy_gbps: float, graph: bool = False,
                           tolerance: float = 2e-2, share: str = ".0%",
                           ) -> tuple[list[Measurement], str, bool]:
    """:func:`time_softmax_provider` of every provider of ``providers`` (name: function) on the
    rows ``x``, in order: the measurements of those that were right, a report of the rows'
    figures (`` | name share`` each, the share of ``copy_gbps`` in the format ``share``, or
    `` | WRONG: ...`` for a provider that was wrong) and whether every provider was right."""
    results, report, ok = [], "", True
    for name, fn in providers.items():
        try:
            found = time_softmax_provider(name, fn, x, dtype, graph=graph, tolerance=tolerance)
        except AssertionError as wrong:
            ok = False
            report += f" | WRONG: {wrong}"
            continue
        results.append(found)
        report += f" | {name} {found.value / copy_gbps:{share}}"
    return results, report, ok


def time_in_rounds(timers: dict[str, Callable[[], Measurement]], rounds: int,
                   copy_gbps: float, share: str = ".1%") -> tuple[list[Measurement], str, bool]:
    """Call each of ``timers`` (name: a call that checks and times one provider on one problem,
    as :func:`time_softmax_provider` does, raising ``AssertionError`` when it is wrong) once a
    round for ``rounds`` rounds in :func:`~teachkit.bench.core.interleaved_rounds` order. Returns
    each right provider's median over its rounds (a :class:`Measurement` of the median time and
    its GB/s), a report as :func:`time_softmax_providers` gives, and whether all were right."""
    import dataclasses
    import statistics

    from .core import interleaved_rounds

    found: dict[str, list[Measurement]] = {name: [] for name in timers}
    report, ok = "", True
    for name in interleaved_rounds(timers, rounds):
        try:
            found[name].append(timers[name]())
        except AssertionError as wrong:
            ok = False
            report += f" | WRONG: {wrong}"
    results = []
    for name, each in found.items():
        if each:
            ms = statistics.median(m.ms for m in each)
            first = each[0]
            results.append(dataclasses.replace(first, ms=ms, value=first.value * first.ms / ms))
            report += f" | {name} {results[-1].value / copy_gbps:{share}}"
    return results, report, ok


def provider_timers(providers: dict[str, Callable[[torch.Tensor], torch.Tensor]],
                    x: torch.Tensor, dtype: str, tolerance: float = 1e-2, settle_ms: int = 0,
                    ) -> dict[str, Callable[[], Measurement]]:
    """For :func:`time_in_rounds`: a call for each provider of ``providers`` (name: function)
    that checks and times it on the rows ``x`` (:func:`time_softmax_provider`, each after
    ``settle_ms`` of untimed calls)."""
    import functools

    return {name: functools.partial(time_softmax_provider, name, fn, x, dtype,
                                    tolerance=tolerance, settle_ms=settle_ms)
            for name, fn in providers.items()}


def cut_timers(configs: dict[str, object], kernel: Callable[..., torch.Tensor], x: torch.Tensor,
               dtype: str) -> dict[str, Callable[[], Measurement]]:
    """For :func:`time_in_rounds`: a call for each configuration of ``configs`` (name:
    configuration with a ``chunk``) that runs ``kernel(rows, config=configuration)`` on ``x``
    cut to rows of one chunk and times it (:func:`time_cut_to_chunks`)."""
    import functools

    return {name: functools.partial(time_cut_to_chunks, name,
                                    functools.partial(kernel, config=config), x, config.chunk,
                                    dtype) for name, config in configs.items()}


def time_shapes(jobs: list[tuple[str, tuple[int, int]]],
                timers_for: Callable[[torch.Tensor, str], dict[str, Callable[[], Measurement]]],
                rounds: int, copy_gbps: float, device: str = "cuda",
                ) -> tuple[list[Measurement], bool]:
    """Time every shape of ``jobs`` (``(dtype name, (rows, cols))``, :func:`dtype_shape_jobs`):
    random rows of that shape on ``device``, the calls ``timers_for(rows, dtype name)`` gives
    them, in :func:`time_in_rounds`, each shape's report written under a progress bar and its
    rows freed before the next. Returns the measurements and whether every provider was right:
    the loop of the ``gpu_checks`` scripts that time resident kernels."""
    from tqdm.auto import tqdm

    results, ok = [], True
    for dtype, (rows, cols) in tqdm(jobs, desc="shapes", mininterval=30):
        x = torch.randn(rows, cols, device=device, dtype=DTYPES[dtype])
        found, report, right = time_in_rounds(timers_for(x, dtype), rounds, copy_gbps)
        results += found
        ok &= right
        tqdm.write(f"{rows}x{cols} {dtype}" + report)
        del x
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return results, ok


def add_shape_arguments(parser: argparse.ArgumentParser, example: str) -> None:
    """The command line of the ``gpu_checks`` scripts that time resident kernels by
    :func:`time_shapes`: ``--rounds`` (default 3), ``--settle`` (``settle_ms``:
    :data:`~teachkit.bench.core.SETTLE_MS` of untimed calls before each provider is timed, at
    the clock it keeps; 0 without it), ``--shapes`` (:func:`dtype_shape_jobs`,
    ``example`` shown in the help), ``--json`` (the record
    :func:`~teachkit.bench.core.finish` writes), and plain launches with no figure (``finish``'s
    ``graph`` and ``plot``), on the ``argparse`` parser ``parser``."""
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", dest="settle_ms", action="store_const", const=SETTLE_MS,
                        default=0, help=f"run each provider {SETTLE_MS} ms untimed before "
                                        "timing it, so that it is timed at the clock it keeps")
    parser.add_argument("--shapes", nargs="+", default=None, metavar="DTYPE:ROWSxCOLS",
                        help=f"only these shapes, e.g. {example}")
    parser.add_argument("--json", default=None, help="save the figures as a record here")
    parser.set_defaults(graph=False, plot=None)


def agrees_with_torch(got: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether ``got`` is ``torch.softmax`` of the rows ``x`` (in float32) within the edge
    checks' tolerance of ``x``'s dtype: 1e-2 for 16-bit inputs, 1e-5 absolute and 1e-4
    relative for float32; NaN where torch gives NaN."""
    small = x.element_size() == 2
    return torch.allclose(got.float(), torch.softmax(x.float(), -1),
                          atol=1e-2 if small else 1e-5, rtol=1e-2 if small else 1e-4,
                          equal_nan=True)


def dtype_shape_jobs(default: dict[str, list[tuple[int, int]]], given: list[str] | None,
                     ) -> list[tuple[str, tuple[int, int]]]:
    """``(dtype name, (rows, cols))`` for each shape of ``default`` (dtype name: shapes), or of
    ``given`` when it names any, as ``DTYPE:ROWSxCOLS`` (e.g. ``bf16:8x8388608``)."""
    if not given:
        return [(dtype, shape) for dtype, shapes in default.items() for shape in shapes]
    jobs = []
    for text in given:
        dtype, _, shape = text.partition(":")
        if dtype not in DTYPES:
            raise ValueError(f"{text!r}: the dtype must be one of {', '.join(DTYPES)}, as in "
                             f"bf16:8x8388608")
        jobs.append((dtype, _parse_shape(shape)))
    return jobs


def _parse_shape(text: str) -> tuple[int, int]:
    """An ``argparse`` type: ``ROWSxCOLS`` of two positive ints, e.g. ``4096x16384``."""
    parts = text.lower().split("x")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not ROWSxCOLS; pass e.g. 4096x16384")
    try:
        rows, cols = (core.positive_int(part) for part in parts)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    return rows, cols


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m teachkit.bench softmax|ceilings``."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m teachkit.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["softmax", "ceilings"])
    parser.add_argument("--shapes", nargs="+", type=_parse_shape, default=None,
                        help="rows x cols, e.g. 4096x16384")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["fp32", "bf16"])
    parser.add_argument("--providers", nargs="+", default=None, choices=PROVIDERS,
                        metavar="PROVIDER",
                        help="which to time (quote names with spaces): " + ", ".join(PROVIDERS))
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if not start(args):
        return 2
    copy = copy_bandwidth()
    print(f"device: {device_name()}")
    print(f"copy bandwidth: {copy:.0f} GB/s (read + write)")
    if args.what == "ceilings":
        dtype = matmul_dtype()
        flops = matmul_tflops(dtype=dtype)
        print(f"{dtype_name(dtype)} matmul: {flops:.0f} TFLOP/s")
        finish(args, [], copy_gbps=copy, matmul_tflops=flops, matmul_dtype=dtype_name(dtype))
        return 0
    shapes = args.shapes or (SOFTMAX_SHAPES if ON_GPU else [(64, 1000), (4, 20000)])
    results = bench_softmax(shapes, args.dtypes, args.providers, graph=args.graph)
    print(format_table(results, ceiling=copy, subject="teachkit.kernels.softmax"))

    def figure() -> object:
        from ..plots.softmax_bench import plot_bandwidth

        return plot_bandwidth(results, copy)

    finish(args, results, figure, copy_gbps=copy)
    return 0

