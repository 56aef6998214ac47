"""GPU check of notebook 08 (FlashAttention in Triton): run from the repository root on a CUDA
machine with `python gpu_checks/nb08_gpu.py`.

1. the exercise checkers of teachkit.exercises.ex08 on their solutions;
2. every code cell of notebooks/08_flash_attention_triton.ipynb, top to bottom, in one namespace
   (no Jupyter needed), with the GPU branches live: the simple and fast kernels at GPU sizes
   against float64, the autotuner and a live sweep, the steps bench, a live SDPA bench;
3. a compact report: seconds per cell, the tail of each cell's output, and FAIL with the
   traceback of the first cell that raises. Exits 1 on any failure, 2 without a GPU.
Set NB08_OUT=<dir> (or $OUT) to also write the full log there.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "08_flash_attention_triton.ipynb"
BUDGET_S = 170.0


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import matplotlib

    matplotlib.use("Agg")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: this script checks the GPU world of notebook 08")
        return 2
    import teachkit

    print(teachkit.describe())
    log: list[str] = []
    start = time.perf_counter()

    # 1. the checkers
    from teachkit.exercises import ex08
    from teachkit.exercises.checking import ExerciseFailed
    from teachkit.exercises.solutions import ex08 as solutions

    for name in ("exp2_update", "key_range", "causal_flops"):
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                getattr(ex08, f"check_{name}")(getattr(solutions, f"solution_{name}"))
        except ExerciseFailed as err:
            print(f"checker {name}: FAIL\n{err}")
            return 1
        print(f"checker {name}: ok")

    # 2. the notebook's cells
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    namespace: dict = {"__name__": "__main__"}
    os.chdir(ROOT / "notebooks")
    failed = False
    for i, cell in enumerate(cells, 1):
        src = "".join(cell["source"])
        first = next((ln for ln in src.splitlines() if not ln.startswith("# NBVAL")), "")[:60]
        buf = io.StringIO()
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(src, f"<cell {i}>", "exec"), namespace)  # noqa: S102
        except Exception:
            failed = True
            buf.write(traceback.format_exc())
        dt = time.perf_counter() - t0
        out = buf.getvalue().rstrip().splitlines()
        log.append(f"--- cell {i} ({dt:.1f} s): {first}\n" + "\n".join(out))
        tail = out[-12:] if failed else out[-6:]
        print(f"[{'FAIL' if failed else 'ok'}] cell {i:>2} {dt:6.1f} s  {first}")
        for line in tail:
            print(f"      {line[:150]}")
        if failed:
            break
    import matplotlib.pyplot as plt

    plt.close("all")
    total = time.perf_counter() - start
    print(f"{len(cells)} code cells, {total:.0f} s in all"
          + (f" (over the {BUDGET_S:.0f} s budget)" if total > BUDGET_S else ""))
    out_dir = os.environ.get("NB08_OUT") or os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "nb08_gpu.log").write_text("\n".join(log) + "\n")
    if failed:
        print("FAIL: notebook 08 does not run top to bottom on this GPU")
        return 1
    print("PASS: notebook 08 runs top to bottom on this GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
