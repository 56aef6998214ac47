"""``teachkit.exercises.load_counting``: a learner's kernel's loads, counted per element while
Triton's interpreter runs it (compiled kernels: ``tests/test_ex06.py``, in a Python whose
Triton compiles)."""

from __future__ import annotations  # noqa: I001  (teachkit first: it sets TRITON_INTERPRET)

from concurrent.futures import ThreadPoolExecutor

import teachkit  # noqa: F401
import torch
import triton
import triton.language as tl

from teachkit.exercises.load_counting import count_loads


@triton.jit
def _reads_times(X, Y, n, TIMES: tl.constexpr, BLOCK: tl.constexpr):
    # Y = TIMES * X, loading each element of X TIMES times and Y not at all.
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], tl.float32)
    for _ in tl.static_range(TIMES):
        total += tl.load(X + cols, mask=cols < n, other=0.0)
    tl.store(Y + cols, total, mask=cols < n)


@triton.jit
def _fails(X, Y, n, TIMES: tl.constexpr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK < 0, "no block is negative")


def test_counts_each_elements_loads_in_each_buffer():
    x, y, spare = torch.randn(1000), torch.zeros(1000), torch.zeros(8)
    counts = count_loads(_reads_times, (4,), (x, y, spare), x, y, 1000, TIMES=3,
                         BLOCK=256)
    assert [c.shape for c in counts] == [(1000,), (1000,), (8,)]
    assert (counts[0] == 3).all() and not counts[1].any() and not counts[2].any()
    assert torch.equal(y, 3 * x)  # it ran


def test_nothing_counted_where_the_interpreter_cannot_run_it():
    x, y = torch.randn(100), torch.zeros(100)
    assert count_loads(lambda *args, **kwargs: None, (1,), (x,), x, y, 100) is None
    assert count_loads(_fails, (1,), (x,), x, y, 100, TIMES=1, BLOCK=128) is None
    counts = count_loads(_reads_times, (1,), (x,), x, y, 100, TIMES=2, BLOCK=128)
    assert (counts[0] == 2).all()  # and it still counts after a failed run


def test_threads_counting_at_once_each_get_their_own_counts():
    def counted(times: int) -> bool:
        x, y = torch.randn(500), torch.zeros(500)
        counts = count_loads(_reads_times, (2,), (x, y), x, y, 500, TIMES=times, BLOCK=256)
        return bool((counts[0] == times).all() and not counts[1].any())

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(counted, [1, 2, 3, 4] * 3))
