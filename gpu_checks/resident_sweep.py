"""GPU sweep of the resident softmax's configuration (notebook 06): run from the repository root on
a CUDA machine with `python gpu_checks/resident_sweep.py`.

For rows of 64k, 256k, 1M and 4M columns, and of 50257, in float32 and bfloat16, every candidate
`ResidentConfig` (columns per program, warps, programs wanted per SM, the next chunk loaded
before the wait, the cap on registers a thread, the chunk kept as the input's words) is checked
against `torch.softmax` and timed beside the split kernels, as a share of the copy bandwidth (GB/s =
2 x tensor bytes / time, median of CUDA-event timings). It prints how many programs of each
configuration fit on the GPU at once (`resident_programs`), and skips a configuration whose
rows need more. The table's choice, `RESIDENT_CONFIGS` (`UNPAIRED_CONFIG` for odd bfloat16
rows), is marked with `*`. About two minutes on an H100. Exits 1 if a result is wrong, 2 without
a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CANDIDATES = [(8192, 4, 4, False, 120), (8192, 4, 4, True, 120), (16384, 8, 2, False, 120),
              (16384, 8, 2, True, 120), (16384, 8, 2, False, None), (32768, 16, 1, True, None),
              (16384, 4, 4, False, 120, True), (32768, 8, 2, False, 120, True),
              (8192, 2, 8, False, 120, True)]
"""``ResidentConfig`` fields ``(chunk, num_warps, per_sm, prefetch, max_registers, words)`` the
sweep times; ``max_registers=None`` is ``register_cap``'s default, the most that ``per_sm``
programs can share (128 for these). The ``words`` configurations are timed for bfloat16
only. Each waits for its rows as the table's do (``l2_prefetch_from``, ``backoff_from``;
``gpu_checks/resident_wait_gpu.py`` times the ways of waiting)."""
SHAPES = [(1024, 65536), (256, 262144), (64, 1048576), (16, 4194304), (1024, 50257)]
"""Rows of 64k to 4M columns, and rows of an odd length (a vocabulary of 50257), which start at
2-byte boundaries in 16-bit dtypes: the words configurations cannot read them, and no
configuration's loads are vectorised."""


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: this script times the resident softmax on a GPU")
        return 2
    import triton.testing

    from teachkit.bench.core import announce_copy_bandwidth
    from teachkit.compare import relative_error
    from teachkit.kernels import softmax_kernels as sk

    copy = announce_copy_bandwidth()
    ok = True
    for dtype in (torch.float32, torch.bfloat16):
        chosen = sk.RESIDENT_CONFIGS[dtype.itemsize]
        candidates = [c for c in CANDIDATES if dtype.itemsize == 2 or not c[5:]]
        for candidate in candidates:
            config = sk.ResidentConfig(*candidate)
            print(f"{str(dtype)[6:]} {tuple(config)}: "
                  f"{sk.resident_programs(dtype, config, 0)} programs fit at once")
        for rows, cols in SHAPES:
            x = torch.randn(rows, cols, device="cuda", dtype=dtype)
            want = torch.softmax(x.float(), -1)
            nbytes = 2 * x.numel() * x.element_size()

            def share(fn: object, nbytes: int = nbytes) -> float:
                return nbytes / triton.testing.do_bench(fn, warmup=10, rep=50) / 1e6 / copy

            cells = [f"split {share(lambda x=x: sk.softmax_split(x)):.0%}"]
            for candidate in candidates:
                config = sk.ResidentConfig(*candidate)
                if (-(-cols // config.chunk) > sk.resident_programs(dtype, config, 0)
                        or (config.words and cols % 2)):
                    continue
                error = relative_error(sk.softmax_resident(x, config=config).float(), want)
                good = error < (1e-5 if dtype == torch.float32 else 1e-2)
                ok &= good
                mark = "*" if config == (sk.UNPAIRED_CONFIG if dtype.itemsize == 2 and cols % 2
                                         else chosen) else ""
                kept = " words" if config.words else " prefetch" if config.prefetch else ""
                cells.append(f"{mark}{candidate[:3]}{kept}"
                             f" {sk.register_cap(config)} registers "
                             f"{share(lambda x=x, c=config: sk.softmax_resident(x, config=c)):.0%}"
                             + ("" if good else f" WRONG ({error:.1e})"))
            print(f"{rows}x{cols} {str(dtype)[6:]}: " + " | ".join(cells), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
