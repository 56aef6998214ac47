"""``python -m teachkit.bench attention``: FlashAttention beside every backend of PyTorch's
``scaled_dot_product_attention``, and the memory each one needs.

TFLOP/s = 4 x B x H x L x S x D / time (two matrix products of 2 x L x S x D flops per head),
halved for causal masks, whose upper triangle is never computed. ``B`` shrinks as ``L`` grows so
that every problem holds about the same number of tokens and fills the GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

from ..device import (
    DEVICE,
    ON_GPU,
    device_name,
    fits_or_skip,
    is_out_of_memory,
    skip_if_out_of_memory,
)
from ..validation import require_kv_heads, require_positive_int
from .attention_backward import DETERMINISTIC, ONE_LOOP, bench_backward, training_memory
from .attention_problems import (
    ATTENTION_LENGTHS,
    HEADS,
    SDPA_BACKENDS,
    TOKENS,
    TRITON_ONLY,
    attention_flops,
    attention_params,
    attention_problems,
    batch_for,
    problem_name,
    sdpa_backend,
)
from .core import (
    DTYPES,
    SETTLE_MS,
    TIMING_BYTES,
    Measurement,
    add_common_arguments,
    copy_bandwidth,
    dtype_name,
    each_job,
    finish,
    format_table,
    matmul_dtype,
    matmul_tflops,
    positive_int,
    progress_bar,
    require_dtype_name,
    require_names,
    require_sizes,
    run_problem,
    start,
    time_ms,
    timing_description,
)

__all__ = ["ATTENTION_LENGTHS", "HOPPER_PROVIDERS", "attention_providers", "attention_flops",
           "batch_for", "problem_name", "attention_params", "attention_bytes", "bench_attention",
           "step_providers", "bench_steps", "bench_sweep", "sweep_params", "peak_memory",
           "format_memory", "record_timing", "main"]

def attention_bytes(B: int, H: int, L: int, D: int, dtype: str, scores: bool = False) -> int:
    """GPU memory one attention problem of the benchmarks takes at its peak: q, k, v, an output
    and the float32 copy of the first output that the others are checked against, plus what the
    timer takes; with ``scores``, also what ``sdpa math`` materialises (float32 scores and
    probabilities, ``B x H x L x L`` each, and float32 copies of q, k and v).

    Examples
    --------
    >>> (attention_bytes(4, 32, 4096, 64, "fp16") - TIMING_BYTES) / 2**30  # 4 x 2 + 4 bytes
    0.375
    """
    size = DTYPES[dtype].itemsize
    tokens = B * H * L * D
    extra = 2 * B * H * L * L * 4 + 3 * tokens * 4 if scores else 0
    return tokens * (4 * size + 4) + extra + TIMING_BYTES


def _random_qkv(B: int, heads: int, L: int, D: int, dtype: str, kv_heads: int | None = None,
                ) -> tuple[torch.Tensor, ...]:
    kv = heads if kv_heads is None else kv_heads
    return tuple(torch.randn(B, h, L, D, device=DEVICE, dtype=DTYPES[dtype])
                 for h in (heads, kv, kv))


PROVIDERS = (*(f"sdpa {name}" for name in SDPA_BACKENDS), "teachkit flash")
"""The names of :func:`attention_providers` on every machine, in order."""
HOPPER_PROVIDERS = (TRITON_ONLY, "teachkit hopper", "teachkit hopper, no overlap",
                    "teachkit hopper, wide, no overlap", "teachkit hopper, persistent",
                    "teachkit hopper, wide, persistent")
"""On an sm_90 GPU only, where ``teachkit flash`` (``flash_attention``) runs the Gluon kernel
of :mod:`teachkit.kernels.flash_hopper` for the inputs it prefers: the Triton kernel of
:mod:`teachkit.kernels.flash` on its own (its table's tiles), and the Gluon kernel on its own with
the softmax under the products and without, in 128-key blocks, and without it in the widest key
block of the head dim (:data:`~teachkit.kernels.flash_hopper.HOPPER_KEY_BLOCKS`: 256 at head dim
64, 128 at 128), each with one program per unit of work; then the first and the wide form on a
persistent grid. The Gluon kernel takes lengths that are multiples of its key block."""


def attention_providers() -> dict[str, Callable[..., torch.Tensor]]:
    """The attention implementations the benchmark compares, by name: ``fn(q, k, v, causal)``:
    :data:`PROVIDERS`, and :data:`HOPPER_PROVIDERS` where the GPU is a Hopper."""
    from ..kernels import flash
    from ..kernels.flash import flash_attention, table_config

    def triton_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      causal: bool) -> torch.Tensor:
        return flash_attention(q, k, v, causal=causal, config=table_config(q, causal))

    table = {f"sdpa {name}": sdpa_backend(name) for name in SDPA_BACKENDS}
    table["teachkit flash"] = lambda q, k, v, causal: flash_attention(q, k, v, causal=causal)
    if flash.hopper_preferred is None:  # this Triton's Gluon lacks the kernel's needs
        return table
    from ..kernels.flash_hopper import HOPPER_KEY_BLOCKS, flash_attention_hopper, hopper_device

    if hopper_device():
        triton_name, overlapped, waited, wide, walked, wide_walked = HOPPER_PROVIDERS
        table[triton_name] = triton_kernel
        table[overlapped] = lambda q, k, v, causal: flash_attention_hopper(q, k, v, causal)
        table[waited] = lambda q, k, v, causal: flash_attention_hopper(q, k, v, causal,
                                                                       overlap=False)
        table[wide] = lambda q, k, v, causal: flash_attention_hopper(
            q, k, v, causal, overlap=False, block_n=max(HOPPER_KEY_BLOCKS[q.shape[-1]]))
        table[walked] = lambda q, k, v, causal: flash_attention_hopper(q, k, v, causal,
                                                                       persistent=True)
        table[wide_walked] = lambda q, k, v, causal: flash_attention_hopper(
            q, k, v, causal, overlap=False, block_n=max(HOPPER_KEY_BLOCKS[q.shape[-1]]),
            persistent=True)
    return table


def bench_attention(
    lengths: Iterable[int] = ATTENTION_LENGTHS,
    head_dims: Iterable[int] = (64, 128),
    causal: Iterable[bool] = (False, True),
    dtype: str = "fp16",
    providers: Iterable[str] | None = None,
    math_max_length: int = 4096,
    tokens: int = TOKENS,
    heads: int = HEADS,
    show_progress: bool = True,
    graph: bool = False,
    kv_heads: Iterable[int] | None = None,
    name_sizes: bool = False,
) -> list[Measurement]:
    """Time every provider on every (L = S, D, causal); TFLOP/s per :func:`attention_flops`.

    An SDPA backend that refuses a problem (not built for this GPU, a head dim it lacks) is
    skipped; the course's kernel is not, so its error (a head dim it does not take) is raised.
    ``sdpa math`` materialises the scores, so it runs only up to ``math_max_length``. A problem,
    or ``sdpa math`` on it, that would not fit in the GPU's free memory (:func:`attention_bytes`)
    or runs out of it is skipped with a printed note. Every output is checked against the first
    provider that runs, itself checked against float32 math on one sequence, before timing. The
    problem is labelled ``D=64 L=4096`` (or with ``causal``); its parameters are
    :func:`attention_params`. ``show_progress`` draws a progress bar naming the current job;
    ``graph`` times CUDA-graph replays. ``kv_heads`` runs every problem once per number of key
    and value heads (grouped-query attention, each dividing ``heads``; SDPA gets
    ``enable_gqa=True``), labelled ``H_kv=...``: the same flops over fewer key/value bytes.
    ``name_sizes`` adds each problem's ``B`` and ``H`` to its label and parameters (for runs
    given their own ``tokens`` or ``heads``: small problems, where the launch shape matters).
    """
    table = attention_providers()
    names = require_names(providers, table, "providers")
    problems = attention_problems(lengths, head_dims, causal, dtype, tokens, heads)
    groups: list[int | None] = [None]
    if kv_heads is not None:
        groups = [require_kv_heads(h, heads) for h in require_sizes(kv_heads, "kv_heads")]
    results: list[Measurement] = []
    with progress_bar(len(problems) * len(groups) * len(names), show_progress) as bar:
        for B, L, D, c in problems:
            for hk in groups:
                sizes = (B, heads) if name_sizes else None
                run_problem(bar, len(names), f"{problem_name(D, L, c, hk, sizes)} {dtype}",
                            attention_bytes(B, heads, L, D, dtype),
                            lambda B=B, L=L, D=D, c=c, hk=hk, sizes=sizes: _attention_problem(
                                table, names, *_random_qkv(B, heads, L, D, dtype, hk), c,
                                dtype, math_max_length, results, bar, graph, hk, sizes))
        bar.set_description("done")
    return results


def _attention_problem(table: dict[str, Callable[..., torch.Tensor]], names: list[str],
                       q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: bool, dtype: str,
                       math_max_length: int, results: list[Measurement], bar: object,
                       graph: bool = False, kv_heads: int | None = None,
                       sizes: tuple[int, int] | None = None) -> None:
    """Check and time every provider on one problem, appending to ``results``."""
    from ..compare import relative_error

    B, H, L, D = q.shape
    problem = problem_name(D, L, c, kv_heads, sizes)
    ref = None
    for name in each_job(bar, names, lambda n: f"{problem} {n}"):
        if name == "sdpa math" and (L > math_max_length or not fits_or_skip(
                attention_bytes(B, H, L, D, dtype, scores=True), f"{problem} {name}")):
            continue
        fn = table[name]
        with skip_if_out_of_memory(f"{problem} {dtype} {name}"):
            try:
                out = fn(q, k, v, c)
            except (RuntimeError, ValueError) as err:
                if is_out_of_memory(err) or not name.startswith("sdpa"):
                    raise  # the course's kernel must take every problem it is given
                continue  # this SDPA backend does not take this problem here
            if ref is None:  # the first provider that runs is checked against float32 math
                group = H // k.shape[1]
                sub = [q[:1, :2 * group]] + [t[:1, :2] for t in (k, v)]  # 2 key heads' groups
                want = F.scaled_dot_product_attention(*(t.float() for t in sub), is_causal=c,
                                                      enable_gqa=group > 1)
                got = fn(*sub, c).float()
                if not relative_error(got, want) < 2e-2:
                    raise AssertionError(f"{name} is wrong on {problem} (first sequence, "
                                         "2 heads)")
                ref = out.float()
            err = relative_error(out.float(), ref)
            if not err < 2e-2:
                raise AssertionError(f"{name} disagrees with the others on {problem}: {err:.2g}")
            del out
            ms = time_ms(lambda fn=fn: fn(q, k, v, c), settle_ms=SETTLE_MS, graph=graph)
            tflops = attention_flops(B, H, L, L, D, c) / ms / 1e9
            results.append(Measurement(problem, dtype, name, ms, tflops, "TFLOP/s",
                                       attention_params(D, L, c, dtype, kv_heads, sizes)))


def step_providers() -> dict[str, Callable[..., torch.Tensor]]:
    """Notebook 08's ladder, from the first correct kernel to the tuned one, one change a step:
    ``fn(q, k, v, causal)``.

    ``simple``: every block loaded and masked, natural exp (:mod:`teachkit.kernels.flash_simple`);
    ``+ exp2``, ``+ block kinds``, ``+ acc in dot``, ``+ heavy first``: the ladder kernel
    (:mod:`teachkit.kernels.flash_ladder`) with one more of the fast kernel's changes each, on
    the simple kernel's 64 x 64 tiles, 4 warps, 2 stages; ``fast, same tiles``: the course's
    kernel itself on those tiles (it also folds the scale into one multiply-add); ``fast, table
    tiles``: with the tiles of the table for this GPU but plain loads; ``fast, table``: the
    table's configuration as ``flash_attention`` launches the Triton kernel (TMA loads where the
    table says so, on Hopper; passed as ``config``, so that on Hopper the step stays the Triton
    kernel where ``flash_attention`` itself would run the Gluon one). :func:`bench_sweep` times
    every candidate configuration instead.
    """
    from ..kernels.flash import flash_attention, table_config
    from ..kernels.flash_ladder import LADDER, SIMPLE_TILES, flash_attention_ladder
    from ..kernels.flash_simple import flash_attention_simple

    steps: dict[str, Callable[..., torch.Tensor]] = {
        "simple": lambda q, k, v, c: flash_attention_simple(q, k, v, causal=c)[0]}
    for name in list(LADDER)[1:]:
        steps[f"+ {name}"] = (lambda q, k, v, c, name=name:
                              flash_attention_ladder(q, k, v, c, step=name)[0])
    steps["fast, same tiles"] = lambda q, k, v, c: flash_attention(q, k, v, causal=c,
                                                                   config=SIMPLE_TILES)
    steps["fast, table tiles"] = lambda q, k, v, c: flash_attention(
        q, k, v, causal=c, config=table_config(q, c)._replace(tma=False))
    # the Triton kernel as the table has it (on Hopper flash_attention itself may pick Gluon)
    steps["fast, table"] = lambda q, k, v, c: flash_attention(q, k, v, causal=c,
                                                              config=table_config(q, c))
    return steps


def bench_steps(length: int = 4096, head_dims: Iterable[int] = (64, 128),
                causal: Iterable[bool] = (False, True), dtype: str = "fp16",
                tokens: int = TOKENS, heads: int = HEADS,
                show_progress: bool = True, graph: bool = False) -> list[Measurement]:
    """Time :func:`step_providers` on one length: what each step of notebook 08 buys.

    A head dim whose problem would not fit in the GPU's free memory, or runs out of it, is
    skipped with a printed note. ``show_progress`` draws a progress bar; ``graph`` times
    CUDA-graph replays.
    """
    table = step_providers()
    require_positive_int(length, "length")
    require_dtype_name(dtype)
    head_dims, causal = require_sizes(head_dims, "head_dims"), list(causal)
    results: list[Measurement] = []
    B = batch_for(length, tokens)
    with progress_bar(len(head_dims) * len(causal) * len(table), show_progress) as bar:
        for D in head_dims:
            def run(D: int = D) -> None:
                q, k, v = _random_qkv(B, heads, length, D, dtype)
                for c in causal:
                    _steps_problem(table, q, k, v, c, dtype, results, bar, graph)

            run_problem(bar, len(causal) * len(table), f"D={D} L={length} {dtype}",
                        attention_bytes(B, heads, length, D, dtype), run)
        bar.set_description("done")
    return results


def _steps_problem(table: dict[str, Callable[..., torch.Tensor]], q: torch.Tensor,
                   k: torch.Tensor, v: torch.Tensor, c: bool, dtype: str,
                   results: list[Measurement], bar: object, graph: bool = False) -> None:
    """Check every step's kernel against SDPA on one problem, time it, append to ``results``."""
    from ..compare import relative_error

    B, H, L, D = q.shape
    problem = problem_name(D, L, c)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=c)
    for name, fn in each_job(bar, table.items(), lambda item: f"{problem} {item[0]}"):
        with skip_if_out_of_memory(f"{problem} {dtype} {name}"):
            err = relative_error(fn(q, k, v, c), want)
            if not err < 2e-2:
                raise AssertionError(f"{name} is wrong on D={D} causal={c}: {err:.2g}")
            ms = time_ms(lambda fn=fn: fn(q, k, v, c), settle_ms=SETTLE_MS, graph=graph)
            tflops = attention_flops(B, H, L, L, D, c) / ms / 1e9
            results.append(Measurement(problem, dtype, name, ms, tflops, "TFLOP/s",
                                       attention_params(D, L, c, dtype)))


def bench_sweep(length: int = 4096, head_dims: Iterable[int] = (64, 128),
                causal: Iterable[bool] = (False, True), dtype: str = "fp16",
                tokens: int = TOKENS, heads: int = HEADS,
                show_progress: bool = True) -> list[Measurement]:
    """Time every candidate configuration of the kernel (tiles, warps, stages) on one length.

    The provider is labelled ``"BLOCK_M x BLOCK_N, W warps, S stages"`` (``", TMA"`` after it
    where keys and values come through TMA) and its ``provider_params`` are the configuration's
    fields (``block_m``, ``block_n``, ``num_warps``, ``num_stages``, ``tma``); configurations
    that do not compile or launch on this GPU are left out, and so, with a printed note, is a
    head dim whose problem would not fit in the GPU's free memory. ``show_progress`` draws a
    progress bar over the configurations of each problem. Times are
    :func:`teachkit.kernels.flash.sweep`'s (plain launches).
    """
    from ..kernels.flash import sweep

    results = []
    require_positive_int(length, "length")
    require_dtype_name(dtype)
    head_dims = require_sizes(head_dims, "head_dims")
    B = batch_for(length, tokens)
    for D in head_dims:
        label = f"D={D} L={length} {dtype}"
        if not fits_or_skip(attention_bytes(B, heads, length, D, dtype), label):
            continue
        with skip_if_out_of_memory(label):
            q, k, v = _random_qkv(B, heads, length, D, dtype)
            for c in causal:
                problem = problem_name(D, length, c)
                for cfg, ms in sweep(q, k, v, c, progress=show_progress):
                    if ms is None:
                        continue
                    tflops = attention_flops(B, heads, length, length, D, c) / ms / 1e9
                    name = (f"{cfg.block_m} x {cfg.block_n}, {cfg.num_warps} warps, "
                            f"{cfg.num_stages} stages" + (", TMA" if cfg.tma else ""))
                    results.append(Measurement(problem, dtype, name, ms, tflops, "TFLOP/s",
                                               attention_params(D, length, c, dtype),
                                               sweep_params(cfg)))
            del q, k, v
    return results


def sweep_params(config: object) -> dict[str, int | bool]:
    """A configuration's fields as a sweep's ``provider_params``: ``block_m``, ``block_n``,
    ``num_warps``, ``num_stages`` and ``tma``.

    Examples
    --------
    >>> from collections import namedtuple
    >>> Config = namedtuple("Config", "block_m block_n num_warps num_stages tma")
    >>> sweep_params(Config(128, 64, 8, 3, False))
    {'block_m': 128, 'block_n': 64, 'num_warps': 8, 'num_stages': 3, 'tma': False}
    """
    return {name: getattr(config, name)
            for name in ("block_m", "block_n", "num_warps", "num_stages", "tma")}


def peak_memory(lengths: Iterable[int] = (1024, 2048, 4096, 8192, 16384), D: int = 64,
                heads: int = 8, dtype: str = "fp16") -> list[dict]:
    """Peak GPU memory of one attention call beyond its inputs, B = 1: the course's kernel,
    SDPA's flash backend and SDPA's math backend (which materialises scores and probabilities).

    Returns one dict per length with MiB per provider (None where it ran out of memory).
    Needs a GPU (``torch.cuda.max_memory_allocated``).
    """
    if not ON_GPU:
        raise RuntimeError("peak_memory measures CUDA allocations; it needs a GPU")
    table = attention_providers()
    rows = []
    for L in lengths:
        row: dict = {"L": L}
        for name in ("teachkit flash", "sdpa flash", "sdpa math"):
            q, k, v = _random_qkv(1, heads, L, D, dtype)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            try:
                table[name](q, k, v, False)
                torch.cuda.synchronize()
                row[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
            except (RuntimeError, torch.OutOfMemoryError):
                row[name] = None
            del q, k, v
            torch.cuda.empty_cache()
        rows.append(row)
    return rows


def pick_steps_length() -> int:
    """The length :func:`bench_steps` uses by default: 4096 on a GPU, 64 in the interpreter."""
    return 4096 if ON_GPU else 64


def format_memory(rows: list[dict]) -> str:
    """A Markdown table of :func:`peak_memory`'s rows."""
    names = [n for n in rows[0] if n != "L"] if rows else []
    lines = ["| L | " + " | ".join(f"{n} (MiB)" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for r in rows:
        cells = ["OOM" if r[n] is None else f"{r[n]:.0f}" for n in names]
        lines.append(f"| {r['L']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record_timing(args: argparse.Namespace) -> str:
    """The ``timing`` of the record ``main`` writes for ``args``: every mode runs each provider
    for :data:`SETTLE_MS` before timing it, except ``--sweep``, whose candidates
    (:func:`teachkit.kernels.flash.sweep`) are timed without it."""
    return timing_description(args.graph, settle_ms=0 if args.sweep else SETTLE_MS)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m teachkit.bench attention [options]``."""
    parser = argparse.ArgumentParser(prog="python -m teachkit.bench attention",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    from ..kernels.decode import HEAD_DIMS

    parser.add_argument("--lengths", nargs="+", type=positive_int, default=None)
    parser.add_argument("--head-dims", nargs="+", type=int, choices=HEAD_DIMS, default=[64, 128],
                        metavar="D", help="head dims, of " + ", ".join(map(str, HEAD_DIMS)))
    parser.add_argument("--causal", nargs="+", choices=["no", "yes"], default=["no", "yes"])
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    parser.add_argument("--providers", nargs="+", default=None,
                        choices=[*PROVIDERS, *HOPPER_PROVIDERS, ONE_LOOP, DETERMINISTIC],
                        metavar="PROVIDER",
                        help="which to time (quote names with spaces): " + ", ".join(PROVIDERS)
                        + f"; on a Hopper GPU also {', '.join(map(repr, HOPPER_PROVIDERS))} "
                        "(lengths that are multiples of 128, of 256 for the wide form at "
                        f"D = 64); with --backward also {ONE_LOOP!r} and, on a Hopper GPU, "
                        f"{DETERMINISTIC!r}")
    parser.add_argument("--kv-heads", nargs="+", type=positive_int, default=None, metavar="H_KV",
                        help="time each problem with these numbers of key/value heads "
                        "(grouped-query attention; divisors of the query heads)")
    parser.add_argument("--tokens", type=positive_int, default=None,
                        help=f"B x L tokens per problem (default {TOKENS}; B = tokens // L, at "
                        "least 1); labels each problem with its B and H")
    parser.add_argument("--heads", type=positive_int, default=None,
                        help=f"query heads (default {HEADS}); labels each problem with its B "
                        "and H")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory")
    parser.add_argument("--sweep", action="store_true",
                        help="time every candidate tile configuration instead")
    parser.add_argument("--steps", action="store_true",
                        help="time notebook 08's kernel steps (simple -> tuned) instead")
    parser.add_argument("--backward", action="store_true",
                        help="time the backward pass instead (and, with --memory, the peak "
                        "memory of a forward plus backward)")
    add_common_arguments(parser)
    args = parser.parse_args(sys.argv[2:] if argv is None else argv)
    if not start(args):
        return 2
    for flag in ("kv_heads", "tokens", "heads"):
        if (args.sweep or args.backward or args.steps) and getattr(args, flag):
            print(f"--{flag.replace('_', '-')} applies to the forward benchmark alone",
                  file=sys.stderr)
            return 2
    if (args.sweep or args.backward) and args.graph:  # plain launches only
        print("--graph does not apply to --sweep or --backward: they time plain launches",
              file=sys.stderr)
        args.graph = False
    mm_dtype = matmul_dtype()
    copy, flops = copy_bandwidth(), matmul_tflops(dtype=mm_dtype)
    print(f"device: {device_name()}")
    print(f"copy bandwidth: {copy:.0f} GB/s; {dtype_name(mm_dtype)} matmul: {flops:.0f} TFLOP/s")
    lengths = args.lengths or (ATTENTION_LENGTHS if ON_GPU else [64, 100])
    kwargs = {} if ON_GPU else {"tokens": 128, "heads": 2}
    causal = [c == "yes" for c in args.causal]
    if args.sweep:
        results = bench_sweep(lengths[0] if args.lengths else pick_steps_length(),
                              args.head_dims, causal, args.dtype, **kwargs)
        for problem in dict.fromkeys(r.problem for r in results):
            best = sorted((r for r in results if r.problem == problem), key=lambda r: -r.value)
            print(f"{problem}: " + "; ".join(f"{r.provider}: {r.value:.0f}" for r in best[:5]))
    elif args.backward:
        results = bench_backward(lengths, args.head_dims, causal, args.dtype, args.providers,
                                 **kwargs)
        print(format_table(results, ceiling=flops, baseline=("sdpa flash", "sdpa cudnn"),
                           subject="teachkit flash"))
    elif args.steps:
        results = bench_steps(lengths[0] if args.lengths else pick_steps_length(), args.head_dims,
                              causal, args.dtype, **kwargs, graph=args.graph)
        print(format_table(results, ceiling=flops, baseline=("simple",)))
    else:
        sized = {name: value for name, value in (("tokens", args.tokens), ("heads", args.heads))
                 if value is not None}
        results = bench_attention(lengths, args.head_dims, causal, args.dtype, args.providers,
                                  **{**kwargs, **sized}, graph=args.graph,
                                  kv_heads=args.kv_heads, name_sizes=bool(sized))
        print(format_table(results, ceiling=flops, baseline=("sdpa flash", "sdpa cudnn"),
                           subject="teachkit flash"))
    extra = {}
    if args.memory and ON_GPU:
        if args.backward:
            rows = training_memory()
        else:
            rows = peak_memory()
        print(format_memory(rows))
        extra["memory"] = rows

    def figure() -> object:
        from ..plots.attention_bench import plot_attention_tflops

        return plot_attention_tflops(results, flops)

    finish(args, results, figure, extra, timing=record_timing(args),
           copy_gbps=copy, matmul_tflops=flops, matmul_dtype=dtype_name(mm_dtype))
    return 0
