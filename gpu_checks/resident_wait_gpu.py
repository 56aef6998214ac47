"""What the resident softmax does while it waits (notebook 06): its kernel timed on a CUDA GPU
with each way of waiting for a row's pairs, as a share of the copy bandwidth. Run from the
repository root: `python gpu_checks/resident_wait_gpu.py [--json PATH]`.

A program of the resident kernel publishes its chunk's ``(m, d)`` and polls its row's slots
until every chunk of the row has published. On rows of many chunks that wait is long: the row's
last program to arrive sets the pace, and hundreds of programs poll L2 meanwhile. Six ways of
waiting, each a `ResidentConfig` of the table's (`RESIDENT_CONFIGS`) with its
``l2_prefetch_from``, ``backoff_from`` and ``bell_from`` set:

- **idle**: poll until the pairs are there;
- **L2 prefetch**: first ask L2 for the chunk of the program's next item (`prefetch_chunk`), so
  its load in the next round finds it there;
- **pauses**: sleep about 256 ns before each poll but the first (`nap`);
- **both**;
- **bell**: count the pair at a word of the row and poll that word alone until the row's
  programs have all counted, then read the pairs (`ring_and_wait`): one word polled where the
  others poll every pair of the row;
- **both and a bell**; and the table's own choice, **shipped**, which turns each on from a row
  length.

Rows of 64k to 4M columns, float32 and bfloat16, beside the split kernels, each checked and
timed by `teachkit.bench.softmax.time_softmax_providers`: plain launches, each after the L2 cache
is cleared; GB/s = 2 x tensor bytes / time.
With `--json` the figures are saved as a record (`softmax_resident_wait_<device>.json`).
Without a GPU the configurations are checked under Triton's interpreter on small rows (where
both are off: they are PTX), and nothing is timed. Exits 1 if a result is wrong.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import teachkit  # noqa: E402  (first: it decides whether Triton interprets)

# isort: split
import torch  # noqa: E402

from teachkit.kernels import softmax_kernels as sk  # noqa: E402

SHAPES = [(1024, 65536), (256, 262144), (64, 1048576), (16, 4194304)]
"""Rows of 64k to 4M columns, 64M elements each: 8 to 512 chunks a row in float32."""
WAITS = {"idle": (None, None, None), "L2 prefetch": (1, None, None), "pauses": (None, 1, None),
         "both": (1, 1, None), "bell": (None, None, 1), "both and a bell": (1, 1, 1)}
"""Provider name: ``(l2_prefetch_from, backoff_from, bell_from)``, each way on for every row or
never."""


def wait_configs(dtype: torch.dtype) -> dict[str, sk.ResidentConfig]:
    """The table's configuration for ``dtype`` with each way of waiting of :data:`WAITS`, and
    as shipped (``"shipped"``)."""
    config = sk.RESIDENT_CONFIGS[dtype.itemsize]
    configs = {name: config._replace(l2_prefetch_from=start, backoff_from=pause, bell_from=bell)
               for name, (start, pause, bell) in WAITS.items()}
    return {**configs, "shipped": config}


def check_small() -> bool:
    """Every configuration of :func:`wait_configs` against float64 on small rows of 2 to 5
    chunks of 1024 columns (chunks as small as the interpreter allows)."""
    ok = True
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for name, config in wait_configs(dtype).items():
            config = config._replace(chunk=1024)
            x = (torch.randn(3, 4500) * 10).to(teachkit.DEVICE, dtype)
            x[1, 1000:3000] = float("-inf")
            y = sk.softmax_resident(x, config=config)
            want = torch.softmax(x.double(), -1)
            err = ((y.double() - want).abs().max() / want.abs().max()).item()
            print(f"{str(dtype)[6:]} {name}: max error {err:.1e}")
            ok &= err < (1e-5 if dtype == torch.float32 else 1e-2)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None, help="save the figures as a record here")
    parser.set_defaults(graph=False, plot=None)  # plain launches, no figure (for finish)
    args = parser.parse_args(argv)
    if not teachkit.ON_GPU:
        print("no CUDA GPU: checking the configurations under Triton's interpreter, timing "
              "nothing")
        return 0 if check_small() else 1
    from tqdm.auto import tqdm

    from teachkit.bench.core import announce_copy_bandwidth, finish
    from teachkit.bench.softmax import time_softmax_providers

    copy = announce_copy_bandwidth()
    results, ok = [], True
    jobs = [(dt, shape) for dt in ("fp32", "bf16") for shape in SHAPES]
    for dt, (rows, cols) in tqdm(jobs, desc="shapes"):
        dtype = torch.float32 if dt == "fp32" else torch.bfloat16
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        providers = {"split rows": sk.softmax_split}
        for name, config in wait_configs(dtype).items():
            if sk.resident_fits(cols, dtype, 0, config):
                providers[name] = lambda x, c=config: sk.softmax_resident(x, config=c)
        found, report, right = time_softmax_providers(providers, x, dt, copy, tolerance=1e-2,
                                                      share=".1%")
        results += found
        ok &= right
        tqdm.write(f"{rows}x{cols} {dt}:{report}")
        del x
    finish(args, results, copy_gbps=copy)  # --json: the record
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
