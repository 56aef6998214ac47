"""GPU check of what the SMs' clock and the board's power do while attention kernels run.

Run from the repository root on a CUDA machine:  python gpu_checks/power_gpu.py [--backward]
Budget: about 3 minutes.

Each provider (the course's FlashAttention forward, SDPA's cuDNN and flash backends) runs
back to back on the forward benchmark's problems (fp16, H = 32, B * L = 16384 tokens,
D = 64 and 128, causal or not, L = 1k / 4k / 16k) for ``--seconds`` after a second of warm-up,
each call after the L2 cache is cleared (as ``triton.testing.do_bench`` times it), while
``nvidia-smi`` samples the SM clock, the board's power and the active clock-throttle reasons
every 50 ms. The providers take turns, in a rotated order, problem by problem. A spell of L2
clearing alone gives the clock and power of a GPU that is not computing.

With ``--backward`` each provider's backward is timed instead, as ``python -m teachkit.bench
attention --backward`` times it (the forward once, then ``torch.autograd.grad`` of its output
again and again; TFLOP/s counted as 2.5 x the forward's flops), into
``power_attention_backward_<device>.json``.

With ``--settle`` it measures instead how the speed settles: after two idle seconds, the course's
kernel and cuDNN each run for three seconds (D = 128, L = 4096, causal and not), and the record
(``power_settle_<device>.json``) holds the median TFLOP/s of the calls that started in each span
of time since the first (0-25 ms, 25-125 ms, ... 2-3 s): ``python -m teachkit.bench attention``
warms each provider up for :data:`teachkit.bench.core.SETTLE_MS` before timing it because of it.

The record (``teachkit/benchmarks/power_attention_<device>.json``) holds each provider's median
TFLOP/s and, in its ``power`` entry, the mean SM clock, the mean power and the share of samples
in which the driver held the clock down to stay under the power limit: so it shows whether a
ratio of two kernels' speeds is a ratio of work per clock cycle or of work per joule.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import teachkit  # noqa: E402

SW_POWER_CAP = 0x4
"""The bit of ``clocks_throttle_reasons.active`` that says the driver lowered the clock to keep
the board under its power limit (NVML's ``nvmlClocksThrottleReasonSwPowerCap``)."""
QUERY = "clocks.sm,power.draw,clocks_throttle_reasons.active"


class Sampler:
    """``nvidia-smi`` sampling the GPU every ``period_ms`` in the background; :meth:`between`
    gives the samples read between two ``time.monotonic()`` stamps."""

    def __init__(self, gpu: str, period_ms: int = 50) -> None:
        self.samples: list[tuple[float, float, float, int]] = []
        self._proc = subprocess.Popen(
            ["nvidia-smi", f"--id={gpu}", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
             f"-lms={period_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                mhz, watts, reasons = float(parts[0]), float(parts[1]), int(parts[2], 16)
            except (IndexError, ValueError):
                continue
            self.samples.append((time.monotonic(), mhz, watts, reasons))

    def between(self, start: float, stop: float) -> list[tuple[float, float, float, int]]:
        return [s for s in self.samples if start <= s[0] <= stop]

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)


def smi_id() -> str:
    """The CUDA device's PCI bus id, which ``nvidia-smi --id`` takes whatever
    ``CUDA_VISIBLE_DEVICES`` says (``"0"`` when torch does not report it)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return "0"
    domain = getattr(props, "pci_domain_id", 0)
    device = getattr(props, "pci_device_id", 0)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def run_for(fn, seconds: float, flush: torch.Tensor) -> list[float]:
    """Call ``fn`` after clearing the L2 cache (``flush.zero_()``) for ``seconds``; the times of
    the calls in microseconds (CUDA events)."""
    times = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(10)]
        for start, end in events:
            flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times += [start.elapsed_time(end) * 1e3 for start, end in events]
    return times


SETTLE_SPANS = (0.0, 0.025, 0.125, 0.25, 0.5, 1.0, 2.0, 3.0)
"""Edges, in seconds since the first call, of the spans ``--settle`` reports."""


def settle(flush: torch.Tensor) -> list:
    """``--settle``: TFLOP/s by time since the first call after two idle seconds, per span of
    :data:`SETTLE_SPANS`, for the course's kernel and cuDNN (each twice, alternating)."""
    from teachkit.bench.attention import attention_providers
    from teachkit.bench.attention_problems import (
        HEADS,
        attention_flops,
        attention_params,
        problem_name,
    )
    from teachkit.bench.core import Measurement

    table = attention_providers()
    rows = []
    B, L, D = 4, 4096, 128
    for causal in (False, True):
        q, k, v = (torch.randn(B, HEADS, L, D, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        flops = attention_flops(B, HEADS, L, L, D, causal)
        for turn, name in enumerate(["teachkit flash", "sdpa cudnn"] * 2):
            fn = functools.partial(table[name], q, k, v, causal)
            fn()
            torch.cuda.synchronize()
            time.sleep(2.0)
            calls = []  # (seconds from the first call's start, ms), both by CUDA events
            origin = torch.cuda.Event(enable_timing=True)
            origin.record()
            stop = time.perf_counter() + SETTLE_SPANS[-1]
            while time.perf_counter() < stop:
                events = [(torch.cuda.Event(enable_timing=True),
                           torch.cuda.Event(enable_timing=True)) for _ in range(5)]
                for a, b in events:
                    flush.zero_()
                    a.record()
                    fn()
                    b.record()
                torch.cuda.synchronize()
                calls += [(origin.elapsed_time(a) / 1e3, a.elapsed_time(b)) for a, b in events]
            line = [f"{problem_name(D, L, causal)} {name} (run {turn // 2 + 1}):"]
            for lo, hi in zip(SETTLE_SPANS, SETTLE_SPANS[1:], strict=False):
                times = sorted(ms for t, ms in calls if lo <= t - calls[0][0] < hi)
                if not times:
                    continue
                ms = times[len(times) // 2]
                params = {**attention_params(D, L, causal, "fp16"), "from_s": lo, "to_s": hi,
                          "run": turn // 2 + 1}
                rows.append(Measurement(problem_name(D, L, causal), "fp16", name, ms,
                                        flops / ms / 1e9, "TFLOP/s", params))
                line.append(f"{lo:g}-{hi:g} s {flops / ms / 1e9:.0f}")
            print(" ".join(line), flush=True)
    return rows


def summary(samples: list[tuple[float, float, float, int]]) -> dict:
    """Mean SM clock (MHz), mean power (W) and the share of samples capped by power."""
    if not samples:
        return {"sm_mhz": None, "watts": None, "power_capped": None, "samples": 0}
    return {"sm_mhz": round(statistics.fmean(s[1] for s in samples), 1),
            "watts": round(statistics.fmean(s[2] for s in samples), 1),
            "power_capped": round(sum(bool(s[3] & SW_POWER_CAP) for s in samples)
                                  / len(samples), 3),
            "samples": len(samples)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="how long each provider runs on each problem (default 3)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--settle", action="store_true",
                        help="only how the speed settles after an idle spell (D = 128, "
                             "L = 4096), into power_settle_<device>.json")
    parser.add_argument("--backward", action="store_true",
                        help="time each provider's backward pass (autograd.grad of its output)")
    parser.add_argument("--json", default=None,
                        help="where to save the record (default "
                             "teachkit/benchmarks/power_attention_<device>.json)")
    args = parser.parse_args()
    if not teachkit.ON_GPU:
        print("no CUDA GPU: this script measures clocks and power of a GPU; run it on one")
        return 2
    from tqdm.auto import tqdm

    from teachkit.bench.attention import attention_providers
    from teachkit.bench.attention_backward import BACKWARD_FLOPS_FACTOR, backward_params
    from teachkit.bench.attention_problems import (
        HEADS,
        attention_flops,
        attention_params,
        attention_problems,
        problem_name,
    )
    from teachkit.bench.core import Measurement, device_slug, record_path, save_results

    flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")  # as do_bench's
    slug = device_slug(teachkit.device.device_name())
    if args.settle:
        path = args.json or record_path(f"power_settle_{slug}", exists=False)
        timing = ("CUDA events of back-to-back calls, each after the L2 cache is cleared, from "
                  "the first call after two idle seconds; the median of each span")
        print(f"record: {save_results(path, settle(flush), timing=timing)}")
        return 0
    table = attention_providers()
    names = ["teachkit flash", "sdpa cudnn", "sdpa flash"]
    gpu = smi_id()
    found = subprocess.run(["nvidia-smi", f"--id={gpu}", "--format=csv,noheader,nounits",
                            "--query-gpu=enforced.power.limit,clocks.max.sm"],
                           capture_output=True, text=True)
    if found.returncode:  # a bus id nvidia-smi does not know: the first GPU
        gpu = "0"
        found = subprocess.run(["nvidia-smi", "--id=0", "--format=csv,noheader,nounits",
                                "--query-gpu=enforced.power.limit,clocks.max.sm"],
                               capture_output=True, text=True, check=True)
    power_limit, max_mhz = (float(x) for x in found.stdout.split(","))
    print(f"nvidia-smi --id={gpu}: power limit {power_limit} W, max SM clock {max_mhz} MHz")
    sampler = Sampler(gpu)
    results, power = [], []
    try:
        time.sleep(1.0)
        start = time.monotonic()
        run_for(lambda: None, args.seconds, flush)
        idle = summary(sampler.between(start + 0.5, time.monotonic()))
        print(f"L2 clearing alone: {idle}", flush=True)
        problems = attention_problems(args.lengths, [64, 128], [False, True], "fp16")
        for turn, (B, L, D, causal) in enumerate(tqdm(problems, desc="problems")):
            q, k, v, do = (torch.randn(B, HEADS, L, D, device="cuda", dtype=torch.float16)
                           for _ in range(4))
            flops = attention_flops(B, HEADS, L, L, D, causal)
            params = attention_params(D, L, causal, "fp16")
            if args.backward:
                q, k, v = (t.requires_grad_() for t in (q, k, v))
                flops *= BACKWARD_FLOPS_FACTOR
                params = backward_params(D, L, causal, "fp16")
            order = names[turn % 3:] + names[:turn % 3]
            line = [problem_name(D, L, causal)]
            for name in order:
                fn = functools.partial(table[name], q, k, v, causal)
                if args.backward:
                    fn = functools.partial(torch.autograd.grad, fn(), (q, k, v), do,
                                           retain_graph=True)
                run_for(fn, 1.0, flush)  # compile, warm up, reach the steady clock
                start = time.monotonic()
                times = run_for(fn, args.seconds, flush)
                stats = summary(sampler.between(start + 0.2, time.monotonic()))
                ms = statistics.median(times) / 1e3
                results.append(Measurement(problem_name(D, L, causal), "fp16", name, ms,
                                           flops / ms / 1e9, "TFLOP/s", params))
                power.append({"problem": problem_name(D, L, causal), "provider": name,
                              **stats})
                line.append(f"{name} {flops / ms / 1e9:.0f} TFLOP/s {stats['sm_mhz']} MHz "
                            f"{stats['watts']} W capped {stats['power_capped']}")
            tqdm.write(" | ".join(line))
    finally:
        sampler.close()
    kind = "power_attention_backward" if args.backward else "power_attention"
    path = args.json or record_path(f"{kind}_{slug}", exists=False)
    timing = (f"median of {args.seconds:g} s of {'backward ' if args.backward else ''}calls per "
              "provider, each after the L2 cache is "
              "cleared (CUDA events); nvidia-smi sampled every 50 ms meanwhile")
    saved = save_results(path, results, {"power": power, "idle": idle,
                                         "power_limit_w": power_limit, "max_sm_mhz": max_mhz},
                         timing=timing)
    print(f"record: {saved}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
