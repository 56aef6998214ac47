"""Exercises of notebook 05 (memory traffic and the roofline): the checkers (solutions in
:mod:`teachkit.exercises.solutions.ex05`).

1. :func:`check_safe_traffic`: bytes read and written by the safe
   three-pass softmax, compared with the instrumented memory of :mod:`teachkit.traffic`.
2. :func:`check_classify`: arithmetic intensity of a kernel and
   whether it is memory- or compute-bound on given ceilings.
3. :func:`check_time_floor`: the shortest time a fused softmax can
   take on a given memory bandwidth.

Every checker draws fresh random cases and, on a wrong answer, raises
:class:`~teachkit.exercises.checking.ExerciseFailed` naming the case and the likely mistake.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..traffic import run_variant
from .checking import ExerciseFailed, call_learner, exercise, expect, fresh_generator, random_int

__all__ = [
    "check_safe_traffic",
    "check_classify",
    "check_time_floor",
]

_ITEMSIZE_DTYPE = {2: torch.bfloat16, 4: torch.float32, 8: torch.float64}




# --------------------------------------------------------------------------------------------
# Exercise 1: bytes of the safe three-pass softmax
# --------------------------------------------------------------------------------------------

@exercise(
    "bytes read and written by the safe three-pass softmax",
    hint="Count pass by pass: what each of the three passes reads and what it writes.",
    forbid=("teachkit.traffic.traffic_model", "teachkit.traffic.traffic_formula",
            "teachkit.traffic.variants_bytes", "teachkit.traffic.measure_variants",
            "teachkit.traffic.run_variant",),
)
def check_safe_traffic(fn: Callable[[int, int, int], dict]) -> None:
    """Check ``fn(M, N, itemsize) -> {"reads": bytes, "writes": bytes}`` for the safe 3-pass.

    The truth is counted: the variant's torch formulation runs on a random ``M x N`` input of
    the matching dtype in a :class:`teachkit.traffic.Memory`, which tallies every load and store.

    Examples
    --------
    >>> from teachkit.exercises.solutions.ex05 import solution_safe_traffic
    >>> check_safe_traffic(solution_safe_traffic)
    [correct] bytes read and written by the safe three-pass softmax
    """
    gen = fresh_generator()
    cases = [(1, 1, 4), (random_int(2, 39, gen), random_int(2, 299, gen), 4),
             (random_int(2, 39, gen), random_int(2, 299, gen), 2),
             (random_int(2, 39, gen), random_int(2, 299, gen), 8), (3, 1, 2)]
    for M, N, itemsize in cases:
        case = f"M={M}, N={N}, itemsize={itemsize}"
        x = torch.randn(M, N, generator=gen, dtype=torch.float64).to(_ITEMSIZE_DTYPE[itemsize])
        _, mem = run_variant("safe 3-pass", x)
        truth = {"reads": mem.reads, "writes": mem.writes}
        got = call_learner(fn, case, M, N, itemsize)
        expect(isinstance(got, dict) and {"reads", "writes"} <= set(got),
               f"On {case}: return a dict with keys 'reads' and 'writes' (bytes), got {got!r}.")
        reads, writes = got["reads"], got["writes"]
        if (reads, writes) == (truth["writes"], truth["reads"]):
            raise ExerciseFailed(f"On {case}: reads and writes are swapped (expected reads "
                                 f"{truth['reads']}, writes {truth['writes']}).")
        mn = M * N * itemsize
        advice = ""
        if reads == 3 * mn and writes == mn:
            advice = ("You counted x and y but not the statistics: pass 2 reads m, pass 3 reads "
                      "m and d, and passes 1 and 2 write them (M values each).")
        elif reads == 3 * mn + 3 * M * itemsize and writes == mn + 2 * M * itemsize:
            advice = ("The statistics m and d are float32 (4 bytes each) whatever x's dtype; "
                      "you counted them at x's itemsize.")
        elif reads == 3 * M * N and writes == M * N:
            advice = "Count bytes, not elements: multiply by the itemsize."
        expect(reads == truth["reads"] and writes == truth["writes"],
               f"On {case}: expected reads {truth['reads']} and writes {truth['writes']} bytes, "
               f"got reads {reads} and writes {writes}." + (f"\n  {advice}" if advice else ""))


# --------------------------------------------------------------------------------------------
# Exercise 2: arithmetic intensity and the bound
# --------------------------------------------------------------------------------------------

def _classify_cases(gen: torch.Generator) -> list[tuple[str, float, float, float, float]]:
    u = float(torch.rand((), generator=gen)) + 0.5
    n = random_int(1000, 8999, gen)
    M, N = random_int(100, 4999, gen), random_int(100, 49999, gen)
    return [
        (f"a {M} x {N} fp32 softmax on H100-like ceilings", 5.0 * M * N, 8.0 * M * N,
         744 * u, 3000 * u),
        (f"a {n}^3 bf16 matmul on H100-like ceilings", 2.0 * n**3, 3.0 * n * n * 2, 744, 3000),
        ("a kernel just above the ridge", 301.0 * 1e9, 1e9, 600.0, 2000.0),
        ("a kernel just below the ridge", 299.0 * 1e9, 1e9, 600.0, 2000.0),
        (f"a {M} x {N} bf16 softmax on a CPU-like machine", 5.0 * M * N, 4.0 * M * N, 1.5, 40.0),
    ]


@exercise(
    "arithmetic intensity and memory- vs compute-bound",
    hint="Intensity is work per byte. A device has its own ratio of the two ceilings; compare "
         "against it, in the same units.",
)
def check_classify(fn: Callable[[float, float, float, float], tuple[float, str]]) -> None:
    """Check ``fn(flops, nbytes, tflops, gbps) -> (intensity, "memory" | "compute")``.

    Examples
    --------
    >>> from teachkit.exercises.solutions.ex05 import solution_classify
    >>> check_classify(solution_classify)
    [correct] arithmetic intensity and memory- vs compute-bound
    """
    for case, flops, nbytes, tflops, gbps in _classify_cases(fresh_generator()):
        got = call_learner(fn, case, flops, nbytes, tflops, gbps)
        ai = flops / nbytes
        bound = "memory" if ai < tflops * 1e12 / (gbps * 1e9) else "compute"
        expect(isinstance(got, tuple) and len(got) == 2,
               f"On {case}: return a pair (intensity, 'memory' or 'compute'), got {got!r}.")
        g_ai, g_bound = got
        if isinstance(g_ai, (int, float)) and math.isclose(g_ai, nbytes / flops, rel_tol=1e-6) \
                and not math.isclose(ai, 1.0, rel_tol=1e-6):
            raise ExerciseFailed(f"On {case}: intensity {g_ai:.4g} is bytes per FLOP; "
                                 f"divide FLOPs by bytes (expected {ai:.4g} FLOP/B).")
        expect(isinstance(g_ai, (int, float)) and math.isclose(g_ai, ai, rel_tol=1e-6),
               f"On {case}: expected intensity {ai:.4g} FLOP/B, got {g_ai!r}.")
        ridge = tflops * 1e3 / gbps
        units = ("" if g_bound == bound else
                 f" The ridge here is {ridge:.4g} FLOP/B = (tflops * 1e12) / (gbps * 1e9); "
                 "check the powers of ten (tera = 1e12, giga = 1e9).")
        expect(g_bound == bound, f"On {case} (intensity {ai:.4g}, ridge {ridge:.4g}): expected "
               f"{bound!r}, got {g_bound!r}.{units}")


# --------------------------------------------------------------------------------------------
# Exercise 3: the time floor of a fused softmax
# --------------------------------------------------------------------------------------------

@exercise(
    "the time floor of a fused softmax",
    hint="A fused softmax moves every byte once each way. Time is bytes over bandwidth; watch the"
         " units.",
    forbid=("teachkit.traffic.traffic_model", "teachkit.traffic.traffic_formula",),
)
def check_time_floor(fn: Callable[[int, int, int, float], float]) -> None:
    """Check ``fn(M, N, itemsize, gbps) -> milliseconds`` against 2 M N itemsize / bandwidth.

    Examples
    --------
    >>> from teachkit.exercises.solutions.ex05 import solution_time_floor
    >>> check_time_floor(solution_time_floor)
    [correct] the time floor of a fused softmax
    """
    gen = fresh_generator()
    for _ in range(4):
        M, N = random_int(1, 19999, gen), random_int(1, 69999, gen)
        itemsize = [2, 4][random_int(0, 1, gen)]
        gbps = 50 + 3000 * float(torch.rand((), generator=gen))
        case = f"M={M}, N={N}, itemsize={itemsize}, {gbps:.0f} GB/s"
        got = call_learner(fn, case, M, N, itemsize, gbps)
        ref = 2 * M * N * itemsize / (gbps * 1e9) * 1e3  # one read, one write, in ms
        expect(isinstance(got, (int, float)), f"On {case}: return a number, got {got!r}.")
        advice = ""
        if math.isclose(got, ref / 2, rel_tol=1e-6):
            advice = "Half the expected time: the output is written too (2 x tensor bytes)."
        elif math.isclose(got, ref / 1e3, rel_tol=1e-6):
            advice = "That is seconds; return milliseconds."
        elif math.isclose(got * 2**30, ref * 1e9, rel_tol=1e-6):
            advice = "GB/s means 1e9 bytes per second, not 2**30."
        expect(math.isclose(got, ref, rel_tol=1e-6),
               f"On {case}: expected {ref:.6g} ms, got {got:.6g}." + (f"\n  {advice}"
                                                                     if advice else ""))


