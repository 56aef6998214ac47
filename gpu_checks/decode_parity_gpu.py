"""How far apart `decode_attention` and SDPA's cuDNN backend really are (notebook 09): each
timed several times, interleaved, beside a plain read of the same cache, on a CUDA GPU.

Run from the repository root: `python gpu_checks/decode_parity_gpu.py [--rounds N] [--json PATH]`.

The decoding record (`python -m teachkit.bench decode`) times each provider once per problem, so
a ratio of 0.99 there may be a difference between the kernels or between two timings of the
same kernel. Here every problem of that record (fp16, H = 32, D = 128, one token per sequence,
batches 1, 8 and 16, caches of 1k to 128k tokens) is timed in ``--rounds`` rounds (default 5),
plainly and on CUDA-graph replays (each after the L2 cache is cleared, as the records are).
Each round times, in an order that reverses from round to round:

- **SDPA cuDNN**, ``scaled_dot_product_attention`` under the cuDNN backend;
- **teachkit default**, ``decode_attention(q, k, v)`` with no config, as a user calls it;
- **read**, a kernel that only reads K and V (a persistent grid summing its blocks, one float
  a program written): what the GPU takes to bring the same bytes in once, with no attention.

It prints, a problem a line, the default's ratio to cuDNN in each round (median, lowest,
highest), how much cuDNN's own times spread across rounds, and each one's GB/s as a share of
the read's. With `--json` it saves the plain and the graph timings as two records
(`decode_parity_<device>.json` and `..._cudagraph.json`; a measurement's
``provider_params["round"]`` says its round). Exits 1 if the default and cuDNN disagree, 2
without a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import teachkit  # noqa: E402  (first: it decides whether Triton interprets)

# isort: split
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BATCHES = (1, 8, 16)
LENGTHS = (1024, 4096, 16384, 65536, 131072)
HEADS, HEAD_DIM = 32, 128
READ_BLOCK = 8192
"""Elements of K (and as many of V) one program loads per iteration of :func:`read_kernel`."""
CUDNN, DEFAULT, READ = "SDPA cuDNN", "teachkit default", "read"


@triton.jit
def read_kernel(K, V, OUT, n_blocks, BLOCK: tl.constexpr):
    """Sum blocks ``pid, pid + grid, ...`` of K and V (flat, ``n_blocks`` whole blocks each)
    into one float32 a program: every byte of both read once, nothing else written."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    start = pid.to(tl.int64) * BLOCK  # 64-bit offsets: a cache may hold 2**31 elements or more
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    for _ in range(pid, n_blocks, tl.num_programs(0)):
        acc += tl.load(K + start + offs, eviction_policy="evict_first").to(tl.float32)
        acc += tl.load(V + start + offs, eviction_policy="evict_first").to(tl.float32)
        start += step
    tl.store(OUT + pid, tl.sum(acc, axis=0))


def read_call(k: torch.Tensor, v: torch.Tensor, sms: int):
    """A call that reads ``k`` and ``v`` once with :func:`read_kernel` (four programs an SM),
    and a check that it did: the sum it returns against torch's."""
    n = k.numel()
    if n % READ_BLOCK:
        raise ValueError(f"the cache's {n} elements are not whole blocks of {READ_BLOCK}")
    grid = min(4 * sms, n // READ_BLOCK)
    out = torch.empty(grid, device=k.device, dtype=torch.float32)
    flat_k, flat_v = k.reshape(-1), v.reshape(-1)

    def call() -> torch.Tensor:
        read_kernel[(grid,)](flat_k, flat_v, out, n // READ_BLOCK, BLOCK=READ_BLOCK, num_warps=8)
        return out

    want = k.sum(dtype=torch.float32) + v.sum(dtype=torch.float32)  # no float32 copy of the cache
    got = call().sum()
    if not torch.isclose(got, want, rtol=1e-3, atol=1.0):
        raise AssertionError(f"read kernel summed {got.item()}, torch {want.item()}")
    return call


def time_problem(batch: int, length: int, rounds: int, graph: bool, sms: int,
                 ) -> tuple[dict[str, list[float]], float]:
    """Times in ms of each provider in each round on one problem, and the cache's bytes."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from teachkit.bench.core import interleaved_rounds, time_ms
    from teachkit.compare import relative_error
    from teachkit.kernels import decode_attention

    q = torch.randn(batch, HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.float16)
    k = torch.randn(batch, HEADS, length, HEAD_DIM, device="cuda", dtype=torch.float16)
    v = torch.randn_like(k)

    def cudnn() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    def default() -> torch.Tensor:
        return decode_attention(q, k, v, check_values=False)

    err = relative_error(default(), cudnn())
    if not err < 1e-2:
        raise AssertionError(f"B={batch} S={length}: default and cuDNN differ by {err:.3g}")
    calls = {CUDNN: cudnn, DEFAULT: default, READ: read_call(k, v, sms)}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for name in interleaved_rounds(calls, rounds):
        times[name].append(time_ms(calls[name], graph=graph))
    return times, 2 * k.numel() * k.element_size()


def report(label: str, times: dict[str, list[float]], nbytes: float) -> str:
    """One problem's line: the default / cuDNN ratio per round and the spread of cuDNN's times,
    marked host-bound past 10 % (the host path of a short call showing through the L2 clear)."""
    ratios = [c / d for c, d in zip(times[CUDNN], times[DEFAULT], strict=True)]
    read = statistics.median(times[READ])
    cudnn, default = statistics.median(times[CUDNN]), statistics.median(times[DEFAULT])
    spread = max(times[CUDNN]) / min(times[CUDNN]) - 1
    return (f"{label:14s} default/cuDNN {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f}, {max(ratios):.3f}]  cuDNN spread {spread:5.1%}  "
            f"read {nbytes / read / 1e6:5.0f} GB/s; of it cuDNN {read / cudnn:.3f}, "
            f"default {read / default:.3f}"
            + ("  (host-bound: cuDNN's times scatter past 10 %)" if spread > 0.1 else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None,
                        help="save the plain timings here, the graph ones beside (_cudagraph)")
    args = parser.parse_args(argv)
    if not teachkit.ON_GPU:
        print("no CUDA GPU: this script times decoding on a GPU")
        return 2
    from tqdm.auto import tqdm

    from teachkit.bench.core import (
        Measurement,
        announce_copy_bandwidth,
        save_results,
        timing_description,
    )
    from teachkit.bench.decode import decode_params, decode_problem

    copy = announce_copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for graph in (False, True):
        print("CUDA-graph replays" if graph else "plain launches")
        results = []
        jobs = [(b, s) for b in BATCHES for s in LENGTHS]
        for batch, length in tqdm(jobs, desc="graph" if graph else "plain"):
            label = decode_problem(batch, length)
            times, nbytes = time_problem(batch, length, args.rounds, graph, sms)
            tqdm.write(report(label, times, nbytes))
            results += [Measurement(label, "fp16", name, ms, nbytes / ms / 1e6, "GB/s",
                                    decode_params(batch, length), {"round": r})
                        for name, each in times.items() for r, ms in enumerate(each)]
            torch.cuda.empty_cache()
        if args.json:
            path = Path(args.json)
            if graph:
                path = path.with_name(f"{path.stem}_cudagraph{path.suffix}")
            print("results:", save_results(path, results, timing=timing_description(graph),
                                           copy_gbps=copy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
