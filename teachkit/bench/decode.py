"""``python -m teachkit.bench decode``: split-KV and paged decoding beside every SDPA backend.

One new token per sequence (``Lq = 1``) against a full cache of ``S`` keys, fp16, ``H = 32``
heads of ``D = 128``, for batches 1, 8, 16 and caches of 1k to 128k tokens. Decoding reads the
whole cache once and does little else, so the figure of merit is **GB/s of K and V read**,
``2 x cache bytes / time``, held against the device's copy bandwidth measured in the same run.

Providers: ``SDPA <backend>`` (``scaled_dot_product_attention`` forced onto each backend with
``torch.nn.attention.sdpa_kernel``; a backend that refuses the problem is left out),
``teachkit unsplit`` (:func:`~teachkit.kernels.decode.decode_attention` with
``num_splits=1``: the plain forward pass, one program per (sequence, head)), ``teachkit paged``
(the same cache in shuffled pages through a block table, ``decode_attention``'s own choice of
how to merge), ``teachkit split-KV`` (the merge kernel after the split kernel),
``teachkit split-KV, one launch`` (the last split of a row merges, no merge kernel) and
``teachkit split-KV, default`` (``decode_attention`` with no config: one launch when launched
plainly; with ``--graph``, the call is captured and takes the configuration for replays). Every
provider is checked against a float32 reference before it is timed.

Tile size, warps, stages and the number of splits can be forced from the command line
(``--block-n``, ``--num-warps``, ``--num-stages``, ``--num-splits``) to sweep them; the
measurements of the teachkit providers then carry what was forced as ``provider_params``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

import torch

from ..device import (
    DEVICE,
    ON_GPU,
    device_name,
    fits_or_skip,
    is_out_of_memory,
    skip_if_out_of_memory,
)
from ..validation import require_kv_heads, require_positive_int
from .core import (
    DTYPES,
    TIMING_BYTES,
    Measurement,
    add_common_arguments,
    copy_bandwidth,
    dtype_name,
    each_job,
    finish,
    format_table,
    positive_int,
    power_of_two,
    progress_bar,
    require_dtype_name,
    require_names,
    require_sizes,
    run_problem,
    start,
    time_ms,
)

__all__ = [
    "DECODE_BATCHES",
    "DECODE_LENGTHS",
    "SDPA_BACKENDS",
    "bench_decode",
    "decode_bytes",
    "decode_problem",
    "decode_params",
    "split_provider",
    "split_params",
    "main",
]

DECODE_BATCHES = (1, 8, 16)
"""Sequences decoded together."""
DECODE_LENGTHS = (1024, 4096, 16384, 65536, 131072)
"""Cache lengths (tokens per sequence)."""
SDPA_BACKENDS = ("flash", "cuDNN", "efficient", "math")
"""``scaled_dot_product_attention`` backends, by the names the tables use."""
SPLIT, UNSPLIT, PAGED = "teachkit split-KV", "teachkit unsplit", "teachkit paged"
ONE_LAUNCH = "teachkit split-KV, one launch"
"""Split-KV whose last split merges (``DecodeConfig.one_launch``): no second kernel."""
DEFAULT = "teachkit split-KV, default"
"""Split-KV as ``decode_attention`` runs it without a config: one launch from Python, the merge
kernel when captured into a CUDA graph (``decode_config(captured=True)``), each with the tiles
``decode_config`` picks for its ranges."""


def decode_problem(batch: int, length: int) -> str:
    """The table label of one problem, e.g. ``'B=8 S=16384'``; its parameters are
    :func:`decode_params`."""
    return f"B={batch} S={length}"


def decode_params(batch: int, length: int, dtype: str = "fp16") -> dict[str, int | str]:
    """The parameters of one decoding problem, as its :class:`Measurement` keeps them: ``B``
    sequences, ``S`` cached tokens each, and the dtype.

    Examples
    --------
    >>> decode_params(8, 16384)
    {'B': 8, 'S': 16384, 'dtype': 'float16'}
    """
    return {"B": batch, "S": length, "dtype": dtype_name(DTYPES[dtype])}


def split_provider(num_splits: int, block_n: int) -> str:
    """The provider label of split-KV forced to ``num_splits`` splits and ``BLOCK_N`` keys per
    iteration, as a sweep records it, e.g. ``'splits=8 BLOCK_N=64'``; its parameters are
    :func:`split_params`."""
    return f"splits={num_splits} BLOCK_N={block_n}"


def split_params(num_splits: int, block_n: int) -> dict[str, int]:
    """The ``provider_params`` of split-KV forced to ``num_splits`` splits and ``BLOCK_N`` keys
    per iteration (what :func:`teachkit.plots.decode.plot_split_sweep` reads).

    Examples
    --------
    >>> split_params(8, 64)
    {'num_splits': 8, 'block_n': 64}
    """
    return {"num_splits": num_splits, "block_n": block_n}


def _backend(name: str) -> object:
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention in float32, one sequence at a time (a float32 copy of one sequence's cache)."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    scale = q.shape[-1] ** -0.5
    for b in range(q.shape[0]):
        s = (q[b].float() @ k[b].float().transpose(-2, -1)) * scale
        out[b] = torch.softmax(s, dim=-1) @ v[b].float()
    return out


def decode_bytes(batch: int, length: int, dtype: str = "fp16", heads: int = 32,
                 kv_heads: int | None = None, head_dim: int = 128) -> int:
    """GPU memory one problem of :func:`bench_decode` takes before its paged provider: the
    cache (K and V), the float32 reference's copies of one sequence's cache (and, with
    grouped-query attention, the cache repeated to every query head), plus what the timer
    takes. The paged provider needs one more copy of K and V (:func:`paged_bytes`).

    Examples
    --------
    >>> decode_bytes(1, 1024, heads=2, head_dim=16) - TIMING_BYTES  # 128 KiB of cache, fp16
    393216
    """
    kv_heads = heads if kv_heads is None else kv_heads
    size = DTYPES[dtype].itemsize
    cache = 2 * batch * kv_heads * length * head_dim * size
    repeated = cache * heads // kv_heads if heads != kv_heads else 0
    reference = 2 * heads * length * head_dim * 4
    return cache + repeated + reference + TIMING_BYTES


def paged_bytes(batch: int, length: int, dtype: str = "fp16", kv_heads: int = 32,
                head_dim: int = 128, page_size: int = 16) -> int:
    """The second copy of K and V that the paged provider builds (whole pages), in bytes, and
    the one sequence's worth that scattering into pages copies on the way."""
    size = DTYPES[dtype].itemsize
    pages = batch * -(-length // page_size)
    return (2 * pages * page_size + length) * kv_heads * head_dim * size


def bench_decode(
    batches: Iterable[int] = DECODE_BATCHES,
    lengths: Iterable[int] = DECODE_LENGTHS,
    dtype: str = "fp16",
    heads: int = 32,
    kv_heads: int | None = None,
    head_dim: int = 128,
    page_size: int = 16,
    sdpa_backends: Iterable[str] = SDPA_BACKENDS,
    num_splits: int | None = None,
    config: object | None = None,
    progress: bool = True,
    graph: bool = False,
) -> list[Measurement]:
    """Time decoding of one token per sequence on every (batch, cache length).

    A problem whose cache would not fit in the GPU's free memory (:func:`decode_bytes`) is
    skipped with a printed note, and so is the paged provider where its second copy of the
    cache (:func:`paged_bytes`) would not fit beside the first; whatever runs out of memory
    anyway is skipped the same way. Skipped problems have no :class:`Measurement`.

    Parameters
    ----------
    batches, lengths : iterable of int
        Sequences decoded together, and the (full) cache length of each.
    dtype : str
        ``"fp16"``, ``"bf16"`` or ``"fp32"``.
    heads, kv_heads, head_dim : int
        Query heads, cache heads (default ``heads``; fewer for grouped-query attention, which
        SDPA backends then get as ``enable_gqa=True``) and head dim.
    page_size : int
        Tokens per page of the paged provider.
    sdpa_backends : iterable of str
        Which of :data:`SDPA_BACKENDS` to time.
    num_splits : int, optional
        Force the split count of ``teachkit split-KV`` (default: its heuristic).
    config : teachkit.kernels.decode.DecodeConfig, optional
        Force the split kernel's tiles, warps and stages (every teachkit provider).
    progress : bool
        Draw a progress bar naming the current job.
    graph : bool
        Time CUDA-graph replays (:func:`teachkit.bench.core.time_ms`).

    Returns
    -------
    list of Measurement
        ``value`` in GB/s of K and V read; ``params`` from :func:`decode_params`, ``problem``
        labels from :func:`decode_problem`; a teachkit provider's ``provider_params`` hold what
        was forced (``num_splits``; ``block_n``, ``num_warps``, ``num_stages`` of ``config``).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    for name, value in (("heads", heads), ("head_dim", head_dim), ("page_size", page_size)):
        require_positive_int(value, name)
    require_kv_heads(kv_heads, heads)
    batches, lengths = require_sizes(batches, "batches"), require_sizes(lengths, "lengths")
    require_dtype_name(dtype)
    sdpa_backends = require_names(sdpa_backends, SDPA_BACKENDS, "sdpa_backends", allow_empty=True)
    problems = [(b, s) for b in batches for s in lengths]
    names = [f"SDPA {n}" for n in sdpa_backends] + [UNSPLIT, PAGED, SPLIT, ONE_LAUNCH, DEFAULT]
    shape = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}
    results: list[Measurement] = []
    with progress_bar(len(problems) * len(names), progress) as bar:
        for batch, length in problems:
            label = f"{decode_problem(batch, length)} {dtype}"
            bar.set_description(label)
            run_problem(bar, len(names), label, decode_bytes(batch, length, dtype, **shape),
                        lambda batch=batch, length=length: _bench_problem(
                            batch, length, dtype, shape, page_size, names, num_splits, config,
                            results, bar, graph))
            if ON_GPU:
                torch.cuda.empty_cache()
        bar.set_description("done")
    return results


def _bench_problem(batch: int, length: int, dtype: str, shape: dict[str, int], page_size: int,
                   names: list[str], num_splits: int | None, config: object | None,
                   results: list[Measurement], bar: object, graph: bool = False) -> None:
    """Check and time every provider on one (batch, length), appending to ``results``."""
    heads, kv_heads, head_dim = shape["heads"], shape["kv_heads"], shape["head_dim"]
    torch_dtype = DTYPES[dtype]
    label = decode_problem(batch, length)
    params = decode_params(batch, length, dtype)
    q = torch.randn(batch, heads, 1, head_dim, device=DEVICE, dtype=torch_dtype)
    k = torch.randn(batch, kv_heads, length, head_dim, device=DEVICE, dtype=torch_dtype)
    v = torch.randn_like(k)
    nbytes = 2 * k.numel() * k.element_size()
    group = heads // kv_heads
    ref = _reference(q, k.repeat_interleave(group, 1) if group > 1 else k,
                     v.repeat_interleave(group, 1) if group > 1 else v)
    for name in each_job(bar, names, lambda n: f"{label} {dtype} {n}"):
        what = f"{label} {dtype} {name}"
        if name == PAGED and not fits_or_skip(
                paged_bytes(batch, length, dtype, kv_heads, head_dim, page_size), what):
            continue
        with skip_if_out_of_memory(what):
            ms = _time_decode(name, label, q, k, v, ref, page_size, num_splits, config, graph)
            if ms is not None:
                results.append(Measurement(label, dtype, name, ms, nbytes / ms / 1e6, "GB/s",
                                           params, _forced(name, num_splits, config)))


def _forced(name: str, num_splits: int | None, config: object | None) -> dict[str, int]:
    """What a teachkit provider was forced to run with, as its ``provider_params``."""
    if name.startswith("SDPA"):
        return {}
    forced = ({"num_splits": num_splits}
              if name in (SPLIT, ONE_LAUNCH, DEFAULT) and num_splits is not None else {})
    if config is not None:
        forced.update(block_n=config.block_n, num_warps=config.num_warps,
                      num_stages=config.num_stages)
    return forced


def _time_decode(name: str, label: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 ref: torch.Tensor, page_size: int, num_splits: int | None,
                 config: object | None, graph: bool = False) -> float | None:
    """Check and time one provider on one problem: ms, or None where an SDPA backend refuses."""
    from torch.nn.attention import sdpa_kernel

    from ..kernels.decode import decode_attention
    from ..paging import paged_from_contiguous

    kw = {"config": config, "check_values": False}
    if name.startswith("SDPA"):
        gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}

        def fn() -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, **gqa)

        try:
            with sdpa_kernel(_backend(name.removeprefix("SDPA "))):
                return _check_and_time(name, label, fn, ref, graph)
        except RuntimeError as err:  # this backend does not take the problem
            if is_out_of_memory(err):
                raise
            return None
    if name == PAGED:  # the same cache in shuffled pages; built, timed, freed on return
        batch, length = k.shape[0], k.shape[2]
        lens = torch.full((batch,), length, dtype=torch.int32)
        lens_dev = lens.to(DEVICE)
        k_pool, v_pool, table = paged_from_contiguous(
            k, v, lens, page_size, gen=torch.Generator().manual_seed(batch + length))
        return _check_and_time(name, label, lambda: decode_attention(
            q, k_pool, v_pool, lens_dev, table, **kw), ref, graph)
    splits = 1 if name == UNSPLIT else num_splits
    if name in (SPLIT, ONE_LAUNCH):
        from ..kernels.decode import default_launch

        # decode_attention's own tiles and splits where not forced; the merge forced into the
        # split kernel (one launch) or into the merge kernel (two), whatever the default
        if config is None:
            config, planned = default_launch(q.shape[0], q.shape[1], q.shape[-1], k.shape[2],
                                             q.dtype, q.device, kv_heads=k.shape[1],
                                             captured=graph)
            splits = planned if splits is None else splits
        kw["config"] = config._replace(one_launch=name == ONE_LAUNCH)
    return _check_and_time(name, label, lambda: decode_attention(
        q, k, v, num_splits=splits, **kw), ref, graph)


def _check_and_time(name: str, label: str, fn: Callable[[], torch.Tensor],
                    ref: torch.Tensor, graph: bool = False) -> float:
    """Check ``fn()`` against the float32 reference, then time it."""
    from ..compare import relative_error

    err = relative_error(fn(), ref)
    if not err < 1e-2:
        raise AssertionError(f"{name} is wrong on {label}: relative error {err:.3g}")
    return time_ms(fn, graph=graph)


def summary(results: list[Measurement], ceiling: float) -> str:
    """One line per problem: split-KV (its default, else the merge kernel's) against the copy
    ceiling, the best SDPA backend, the unsplit kernel, and paged against contiguous.

    Examples
    --------
    >>> rows = [Measurement("B=1 S=4096", "fp16", p, 1.0, v, "GB/s", decode_params(1, 4096))
    ...         for p, v in (("SDPA cuDNN", 1650), (UNSPLIT, 500), (PAGED, 2600), (DEFAULT, 2700))]
    >>> for part in summary(rows, ceiling=3000).split(", "):
    ...     print(part)
    B=1 S=4096: split-KV 2700 GB/s = 90% of copy
    1.64x SDPA cuDNN
    5.4x unsplit
    paged 96% of split-KV
    """
    lines = []
    for label in dict.fromkeys(r.problem for r in results):
        got = {r.provider: r.value for r in results if r.problem == label}
        split = got.get(DEFAULT, got.get(SPLIT))
        if split is None:
            continue
        sdpa = {p: v for p, v in got.items() if p.startswith("SDPA")}
        parts = [f"{label}: split-KV {split:.0f} GB/s = {split / ceiling:.0%} of copy"]
        if sdpa:
            best = max(sdpa, key=sdpa.get)
            parts.append(f"{split / sdpa[best]:.2f}x {best}")
        if UNSPLIT in got:
            parts.append(f"{split / got[UNSPLIT]:.1f}x unsplit")
        if PAGED in got:
            parts.append(f"paged {got[PAGED] / split:.0%} of split-KV")
        lines.append(", ".join(parts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m teachkit.bench decode [options]``."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m teachkit.bench decode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    from ..kernels.decode import HEAD_DIMS, MAX_SPLITS, DecodeConfig, decode_config

    parser.add_argument("--batches", nargs="+", type=positive_int, default=None)
    parser.add_argument("--lengths", nargs="+", type=positive_int, default=None,
                        help="cache lengths, e.g. 4096 131072")
    parser.add_argument("--dtype", choices=list(DTYPES), default="fp16")
    parser.add_argument("--heads", type=positive_int, default=None)
    parser.add_argument("--kv-heads", type=positive_int, default=None,
                        help="cache heads, a divisor of --heads (default: --heads)")
    parser.add_argument("--head-dim", type=int, choices=HEAD_DIMS, default=None, metavar="D",
                        help="one of " + ", ".join(map(str, HEAD_DIMS)))
    parser.add_argument("--page-size", type=positive_int, default=16)
    parser.add_argument("--sdpa", nargs="*", choices=SDPA_BACKENDS, default=list(SDPA_BACKENDS),
                        help="SDPA backends to time (none: only teachkit)")
    parser.add_argument("--num-splits", type=positive_int, default=None,
                        help=f"1 .. {MAX_SPLITS}")
    parser.add_argument("--block-n", type=power_of_two, default=None,
                        help="keys per iteration, a power of two >= 16")
    parser.add_argument("--num-warps", type=power_of_two, default=None)
    parser.add_argument("--num-stages", type=positive_int, default=None)
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    heads = args.heads or (32 if ON_GPU else 2)
    if args.kv_heads is not None and heads % args.kv_heads:
        parser.error(f"--kv-heads {args.kv_heads} does not divide the {heads} query heads; pass "
                     "a divisor (grouped-query attention shares each cache head among "
                     "heads / kv-heads query heads)")
    if args.num_splits is not None and args.num_splits > MAX_SPLITS:
        parser.error(f"--num-splits {args.num_splits} is more than {MAX_SPLITS}; pass 1 .. "
                     f"{MAX_SPLITS}")
    if args.block_n is not None and args.block_n < 16:
        parser.error(f"--block-n {args.block_n} is below 16 (tl.dot needs 16 rows); pass 16 or "
                     "more")
    if not start(args):
        return 2
    head_dim = args.head_dim or (128 if ON_GPU else 16)
    config = None
    if args.block_n or args.num_warps or args.num_stages:
        capability = torch.cuda.get_device_capability() if ON_GPU else None
        base = decode_config(head_dim, DTYPES[args.dtype], capability)
        config = DecodeConfig(args.block_n or base.block_n, args.num_warps or base.num_warps,
                              args.num_stages or base.num_stages)
    copy = copy_bandwidth()
    print(f"device: {device_name()}")
    print(f"copy bandwidth: {copy:.0f} GB/s (read + write)")
    results = bench_decode(
        batches=args.batches or (DECODE_BATCHES if ON_GPU else (1, 2)),
        lengths=args.lengths or (DECODE_LENGTHS if ON_GPU else (40, 100)),
        dtype=args.dtype, heads=heads, kv_heads=args.kv_heads, head_dim=head_dim,
        page_size=args.page_size, sdpa_backends=args.sdpa, num_splits=args.num_splits,
        config=config, graph=args.graph)
    baseline = "SDPA cuDNN" if any(r.provider == "SDPA cuDNN" for r in results) else UNSPLIT
    print(format_table(results, ceiling=copy, baseline=baseline))
    print(summary(results, copy))

    def figure() -> object:
        from ..plots.decode import plot_decode_bandwidth

        return plot_decode_bandwidth(results, copy)

    finish(args, results, figure, copy_gbps=copy)
    return 0
