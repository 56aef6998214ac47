"""The resident softmax on its longest rows (notebook 06): the table's configuration against the
long-row one, on a CUDA GPU. Run from the repository root:
`python gpu_checks/resident_long_gpu.py [--rounds N] [--waits] [--fill-grid] [--bell]
[--unexchanged] [--json PATH]`.

A row of the resident kernel is held by as many programs as it has chunks, and they wait for
each other's ``(m, d)`` pairs. `RESIDENT_CONFIGS` (four programs of four warps a multiprocessor)
gives a float32 row of 4M columns 512 programs; `LONG_ROW_CONFIGS` gives it half as many, each
of eight warps holding twice the columns (two a multiprocessor), with the L2 prefetch and the
pauses between polls on from the first chunk. `softmax` takes the long-row configuration from
`LONG_ROW_FROM` columns. Here each shape is timed by:

- **split rows**, the two-read split kernels;
- **table**, `RESIDENT_CONFIGS` for the dtype, waiting as it does (`l2_prefetch_from`,
  `backoff_from`);
- **long rows**, `LONG_ROW_CONFIGS`, and with `--waits` the same with neither way of waiting
  (**long rows, idle**) and with the L2 prefetch alone (**long rows, L2 prefetch**);
- **entry point**, `softmax`, which picks;
- with `--fill-grid`, **table, grid filled** and **long rows, grid filled**: the same
  configurations launching every program that fits (`fill_grid`), where the shipped ones launch
  the most whole rows a round: a float32 row of 1.5M or 3M columns is 192 or 384 chunks of the
  table's, so on 132 multiprocessors a round of whole rows leaves 144 of its 528 programs
  unlaunched;
- with `--bell`, **table, bell** and **long rows, bell**: the same configurations counting
  each pair at a word of its row and polling that word alone before reading the pairs
  (`bell_from=1`, `ring_and_wait`);
- with `--unexchanged`, **table, cut to chunks** and **long rows, cut to chunks**: the same
  configurations on the same tensor viewed as rows of one chunk each (``rows x cols / chunk``
  rows of ``chunk`` columns). Each program then reads, holds and writes the same bytes as on the
  long rows, with the L2 prefetch and the pauses on or off as there, but its row's only pair
  is its own, so it waits for no other program: the gap between a configuration and its cut
  rows is what the exchange costs. The programs launched may differ: as many as fit for the cut
  rows, the most whole rows a round for the long ones. These are checked against
  `torch.softmax` of the cut rows (a softmax of each chunk, not of the long rows).

Rows of 1M to 4M columns in float32 and 2M to 8M in bfloat16 (64M elements or so each), each
provider checked against `torch.softmax`, then timed in ``--rounds`` rounds (default 3) in an
order that reverses each round; plain launches, each after the L2 cache is cleared; a
measurement is the median of its rounds. GB/s = 2 x tensor bytes / time, printed as a share of
the copy bandwidth. Each configuration compiles once a row length (a few seconds each): about
three minutes on an H100, five with `--waits`. With `--json` the figures are saved as a record
(`softmax_resident_long_<device>.json`). Exits 1 if a result is wrong, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import teachkit  # noqa: E402  (first: it decides whether Triton interprets)

# isort: split
import torch  # noqa: E402

from teachkit.bench.softmax import add_shape_arguments  # noqa: E402
from teachkit.kernels import softmax_kernels as sk  # noqa: E402

SHAPES = {"fp32": [(64, 1 << 20), (52, 5 << 18), (48, 3 << 19), (32, 1 << 21), (24, 3 << 20),
                   (16, 1 << 22)],
          "bf16": [(32, 1 << 21), (16, 1 << 22), (8, 1 << 23)]}
"""Rows either side of `LONG_ROW_FROM`: float32 from 1M to 4M columns (1.25M, 1.5M and 3M
among them), bfloat16 from 2M to 8M."""


def providers(dtype: torch.dtype, waits: bool = False, fill_grid: bool = False,
              bell: bool = False) -> dict[str, object]:
    """Name: a function of the rows, for every provider of the module docstring (the two ways
    of waiting of the long-row configuration with ``waits``, both configurations with every
    program launched with ``fill_grid``, and with a bell with ``bell``)."""
    table, long = sk.RESIDENT_CONFIGS[dtype.itemsize], sk.LONG_ROW_CONFIGS[dtype.itemsize]
    configs = {"table": table, "long rows": long}
    if waits:
        configs |= {"long rows, idle": long._replace(l2_prefetch_from=None, backoff_from=None),
                    "long rows, L2 prefetch": long._replace(backoff_from=None)}
    if fill_grid:
        configs |= {"table, grid filled": table._replace(fill_grid=True),
                    "long rows, grid filled": long._replace(fill_grid=True)}
    if bell:
        configs |= {"table, bell": table._replace(bell_from=1),
                    "long rows, bell": long._replace(bell_from=1)}
    found = {"split rows": sk.softmax_split}
    found |= {name: (lambda x, c=config: sk.softmax_resident(x, config=c))
              for name, config in configs.items()}
    return found | {"entry point": sk.softmax}


def unexchanged(x: torch.Tensor) -> dict[str, sk.ResidentConfig]:
    """Name: configuration, of the ``--unexchanged`` providers for the rows ``x``: the table's
    and the long-row configuration where a whole number of their chunks makes a row, each
    waiting as it does on ``x``'s rows (the L2 prefetch and the pauses on or off as there,
    :func:`~teachkit.kernels.softmax_kernels.wait_constants`), though its cut rows are one chunk
    long."""
    found = {}
    capability = torch.cuda.get_device_capability(x.device)
    for name, config in (("table", sk.RESIDENT_CONFIGS[x.element_size()]),
                         ("long rows", sk.LONG_ROW_CONFIGS[x.element_size()])):
        g, rest = divmod(x.shape[1], config.chunk)
        if rest or not sk.resident_fits(x.shape[1], x.dtype, x.device.index or 0, config):
            continue
        waits = sk.wait_constants(config, g, capability)
        found[f"{name}, cut to chunks"] = config._replace(
            l2_prefetch_from=1 if waits["L2_PREFETCH"] else None,
            backoff_from=1 if waits["BACKOFF"] else None)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_shape_arguments(parser, "fp32:48x1572864 bf16:8x8388608")
    parser.add_argument("--waits", action="store_true",
                        help="also the long-row configuration idle and with the L2 prefetch alone")
    parser.add_argument("--fill-grid", action="store_true",
                        help="also both configurations launching every program that fits")
    parser.add_argument("--bell", action="store_true",
                        help="also both configurations polling one word a row (bell_from=1)")
    parser.add_argument("--unexchanged", action="store_true",
                        help="also the table's and the long-row configuration on the rows cut "
                             "to one chunk each, which wait for no other program")
    args = parser.parse_args(argv)
    if not teachkit.ON_GPU:
        print("no CUDA GPU: this script times the resident softmax on a GPU")
        return 2
    from teachkit.bench.core import announce_copy_bandwidth, finish
    from teachkit.bench.softmax import (
        cut_timers,
        dtype_shape_jobs,
        provider_timers,
        time_shapes,
    )

    copy = announce_copy_bandwidth()

    def timers_for(x, dt):
        offered = providers(x.dtype, args.waits, args.fill_grid, args.bell)
        long_rows = sk.LONG_ROW_CONFIGS[x.element_size()]
        timed = {name: fn for name, fn in offered.items()
                 if name in ("split rows", "entry point")
                 or sk.resident_fits(x.shape[1], x.dtype, 0, long_rows)}
        timers = provider_timers(timed, x, dt, settle_ms=args.settle_ms)
        if args.unexchanged:
            timers |= cut_timers(unexchanged(x), sk.softmax_resident, x, dt)
        return timers

    results, ok = time_shapes(dtype_shape_jobs(SHAPES, args.shapes), timers_for, args.rounds,
                              copy)
    finish(args, results, copy_gbps=copy)  # --json: the record
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
