"""Checkers of notebook 06: they accept the solutions, hint on stubs, and explain wrong answers.

The kernels run on teachkit.DEVICE (Triton's interpreter on a CPU).
"""

from __future__ import annotations  # noqa: I001  (teachkit first: it sets TRITON_INTERPRET)

import teachkit  # noqa: F401
import ast
import inspect
import math
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

from teachkit.exercises import ex06
from teachkit.exercises.solutions import ex06 as solutions
from teachkit.exercises.checking import ExerciseFailed
from teachkit.kernels import softmax_kernels


def _stub(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- exercise 1: one-row kernel


@triton.jit
def _zero_padding_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty),
             mask=cols < n_cols)


@triton.jit
def _unshifted_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x.to(tl.float32))
    tl.store(Y + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty),
             mask=cols < n_cols)


def _launcher(kernel, use_n_cols_as_stride=False):
    def run(x):
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        stride = x.shape[1] if use_n_cols_as_stride else x.stride(0)
        kernel[(x.shape[0],)](x, y, x.shape[1], stride, y.stride(0),
                              BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
    return run


def test_row_softmax_accepts_solution(capsys):
    assert ex06.check_row_softmax(solutions.solution_row_softmax) is None
    assert "[correct]" in capsys.readouterr().out


def test_row_softmax_hints_on_stub(capsys):
    assert ex06.check_row_softmax(_stub) is None
    out = capsys.readouterr().out
    assert "[not attempted]" in out and "past the row's end" in out


def test_row_softmax_zero_padding():
    with pytest.raises(ExerciseFailed, match=r"(?s)loaded as 0.*other=float\('-inf'\)"):
        ex06.check_row_softmax(_launcher(_zero_padding_kernel))


def test_row_softmax_without_max():
    with pytest.raises(ExerciseFailed, match="subtract the row maximum"):
        ex06.check_row_softmax(_launcher(_unshifted_kernel))


def test_row_softmax_wrong_stride(unwatched):
    from teachkit.kernels.teaching import row_softmax_kernel

    with pytest.raises(ExerciseFailed, match="row stride"):
        ex06.check_row_softmax(_launcher(row_softmax_kernel, use_n_cols_as_stride=True))


def test_row_softmax_wrong_dtype(unwatched):
    with pytest.raises(ExerciseFailed, match="Cast before the store"):
        ex06.check_row_softmax(lambda x: solutions.solution_row_softmax(x.float()))


# ---------------------------------------------------------------- exercise 2: combine


@triton.jit
def _stub_combine(m_a, d_a, m_b, d_b):
    raise NotImplementedError


@triton.jit
def _unguarded_combine(m_a, d_a, m_b, d_b):
    m = tl.maximum(m_a, m_b)
    return m, d_a * tl.exp(m_a - m) + d_b * tl.exp(m_b - m)


@triton.jit
def _unscaled_combine(m_a, d_a, m_b, d_b):
    return tl.maximum(m_a, m_b), d_a + d_b


@triton.jit
def _inverted_combine(m_a, d_a, m_b, d_b):
    m = tl.maximum(m_a, m_b)
    safe = tl.where(m == float("-inf"), 0.0, m)
    return m, d_a * tl.exp(safe - m_a) + d_b * tl.exp(safe - m_b)


def test_combine_accepts_solution(capsys):
    assert ex06.check_combine(solutions.solution_combine) is None
    assert "[correct]" in capsys.readouterr().out


def test_combine_hints_on_stub(capsys):
    assert ex06.check_combine(_stub_combine) is None
    out = capsys.readouterr().out
    assert "[not attempted]" in out and "both sides are empty" in out


def test_combine_nan_without_guard():
    with pytest.raises(ExerciseFailed, match=r"(?s)empty.*NaN.*tl.where"):
        ex06.check_combine(_unguarded_combine)


def test_combine_without_rescale():
    with pytest.raises(ExerciseFailed, match="too large"):
        ex06.check_combine(_unscaled_combine)


def test_combine_inverted_factor():
    with pytest.raises(ExerciseFailed):
        ex06.check_combine(_inverted_combine)


def test_combine_needs_triton_jit():
    def plain(m_a, d_a, m_b, d_b):
        return m_a, d_a

    with pytest.raises(ExerciseFailed, match="@triton.jit"):
        ex06.check_combine(plain)


# ---------------------------------------------------------------- exercise 3: splits


def test_n_splits_accepts_solution(capsys):
    assert ex06.check_n_splits(solutions.solution_n_splits) is None
    assert "[correct]" in capsys.readouterr().out


def test_n_splits_hints_on_stub(capsys):
    assert ex06.check_n_splits(_stub) is None
    assert "chunks long enough" in capsys.readouterr().out


def test_n_splits_uncapped():
    with pytest.raises(ExerciseFailed, match="shorter than 2048"):
        ex06.check_n_splits(lambda r, c, s: math.ceil(4 * s / r))


def test_n_splits_one_per_sm():
    with pytest.raises(ExerciseFailed, match="programs for"):
        ex06.check_n_splits(lambda r, c, s: max(1, min(math.ceil(s / r), c // 2048)))


def test_n_splits_too_many():
    with pytest.raises(ExerciseFailed, match="more than needed"):
        ex06.check_n_splits(lambda r, c, s: max(1, c // 2048))


def test_n_splits_float():
    with pytest.raises(ExerciseFailed, match="whole number"):
        ex06.check_n_splits(lambda r, c, s: 4 * s / r)


def test_n_splits_known_values():
    assert solutions.solution_n_splits(4, 16_777_216, 132) == 132
    assert solutions.solution_n_splits(64, 1_048_576, 132) == 9
    assert solutions.solution_n_splits(1024, 65_536, 132) == 1
    assert solutions.solution_n_splits(2, 10_000, 132) == 4


# ---------------------------------------------------------------- exercise 2b: online kernel


@triton.jit
def _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr, OTHER: tl.constexpr,
                 RESCALE: tl.constexpr, GUARD: tl.constexpr, MERGE: tl.constexpr,
                 LOAD_MASK: tl.constexpr, STORE_MASK: tl.constexpr, X_STRIDE: tl.constexpr):
    # The solution, with one mistake switched on by a flag.
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * (stride_x if X_STRIDE else n_cols)
    y_row = Y + row * stride_y
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    d = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        if LOAD_MASK:
            x = tl.load(x_row + cols, mask=cols < n_cols, other=OTHER).to(tl.float32)
        else:
            x = tl.load(x_row + cols).to(tl.float32)
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new) if GUARD else m_new
        if RESCALE:
            d = d * tl.exp(m - shift) + tl.exp(x - shift)
        else:
            d = d + tl.exp(x - shift)
        m = m_new
    m_row = tl.max(m, 0)
    if MERGE:
        d_row = tl.sum(d * tl.exp(m - m_row), 0)
    else:
        d_row = tl.sum(d, 0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        y = (tl.exp(x - m_row) / d_row).to(Y.dtype.element_ty)
        if STORE_MASK:
            tl.store(y_row + cols, y, mask=cols < n_cols)
        else:
            tl.store(y_row + cols, y)


@triton.jit
def _online_zero_padding(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK, 0.0, True, True, True, True, True, True)


@triton.jit
def _online_no_rescale(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK, float("-inf"), False, True, True, True,
                 True, True)


@triton.jit
def _online_no_guard(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK, float("-inf"), True, False, True, True,
                 True, True)


@triton.jit
def _online_lanes_summed(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK, float("-inf"), True, True, False, True,
                 True, True)


@triton.jit
def _online_unmasked_load(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK, float("-inf"), True, True, True, False,
                 True, True)


@triton.jit
def _online_unmasked_store(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK, float("-inf"), True, True, True, True,
                 False, True)


@triton.jit
def _online_n_cols_stride(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _online_body(X, Y, n_cols, stride_x, stride_y, BLOCK, float("-inf"), True, True, True, True,
                 True, False)


@triton.jit
def _scalar_stats(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr, RESCALE: tl.constexpr):
    # One (m, d) per row, updated with tl.max and tl.sum on every block (the blog kernel's way).
    row = tl.program_id(0).to(tl.int64)
    m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)
    d = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        x = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        if RESCALE:
            d = d * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), 0)
        else:
            d = d + tl.sum(tl.exp(x - shift), 0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(Y + row * stride_y + cols, (tl.exp(x.to(tl.float32) - m) / d)
                 .to(Y.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def _scalar_online(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _scalar_stats(X, Y, n_cols, stride_x, stride_y, BLOCK, True)


@triton.jit
def _scalar_no_rescale(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _scalar_stats(X, Y, n_cols, stride_x, stride_y, BLOCK, False)


@triton.jit
def _three_passes(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        m = tl.maximum(m, x.to(tl.float32))
    m_row = tl.max(m, 0)
    d = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        d += tl.exp(x.to(tl.float32) - m_row)
    d_row = tl.sum(d, 0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(Y + row * stride_y + cols, (tl.exp(x.to(tl.float32) - m_row) / d_row)
                 .to(Y.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def _three_while_passes(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # _three_passes with while loops: the maximum, the sum, the output, each a read of the row.
    row = tl.program_id(0).to(tl.int64)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    start = 0
    while start < n_cols:
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        m = tl.maximum(m, x.to(tl.float32))
        start += BLOCK
    m_row = tl.max(m, 0)
    d = tl.zeros([BLOCK], tl.float32)
    start = 0
    while start < n_cols:
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        d += tl.exp(x.to(tl.float32) - m_row)
        start += BLOCK
    d_row = tl.sum(d, 0)
    start = 0
    while start < n_cols:
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(Y + row * stride_y + cols, (tl.exp(x.to(tl.float32) - m_row) / d_row)
                 .to(Y.dtype.element_ty), mask=cols < n_cols)
        start += BLOCK


@triton.jit
def _three_passes_in_a_helper(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    _three_passes(X, Y, n_cols, stride_x, stride_y, BLOCK)  # no loop in sight here


@triton.jit
def _passes_counted_by_range(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # One loop nest of two loops, run three times: the maximum, the sum, then the output.
    row = tl.program_id(0).to(tl.int64)
    m_row = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)
    d_row = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
    for p in range(3):
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        d = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            x = x.to(tl.float32)
            if p == 0:
                m = tl.maximum(m, x)
            elif p == 1:
                d += tl.exp(x - m_row)
            else:
                tl.store(Y + row * stride_y + cols, (tl.exp(x - m_row) / d_row)
                         .to(Y.dtype.element_ty), mask=cols < n_cols)
        if p == 0:
            m_row = tl.max(m, 0)
        elif p == 1:
            d_row = tl.sum(d, 0)


@triton.jit
def _one_block_fused(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # Ignores BLOCK and holds the whole row at once: right on the checker's rows, one read.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, 4096)
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
    x = x.to(tl.float32)
    m = tl.max(x, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    e = tl.exp(x - shift)
    tl.store(Y + row * stride_y + cols, (e / tl.sum(e, 0)).to(Y.dtype.element_ty),
             mask=cols < n_cols)


@triton.jit
def _methods_and_ranges(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # Two passes written with tl.range and the tensor's methods (x.max(0), x.sum(0)).
    row = tl.program_id(0).to(tl.int64)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    d = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, x.to(tl.float32))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        d = d * tl.exp(m - shift) + tl.exp(x.to(tl.float32) - shift)
        m = m_new
    m_row = m.max(0)
    d_row = (d * tl.exp(m - m_row)).sum(0)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(Y + row * stride_y + cols, (tl.exp(x.to(tl.float32) - m_row) / d_row)
                 .to(Y.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def _online_stub(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    raise NotImplementedError  # delete this line when your kernel is written


def test_online_kernel_accepts_solution_and_one_scalar_pair(capsys):
    ex06.check_online_kernel(solutions.solution_online_kernel)
    ex06.check_online_kernel(_scalar_online)
    ex06.check_online_kernel(_methods_and_ranges)
    ex06.check_online_kernel(_online_stub)
    out = capsys.readouterr().out
    assert out.count("[correct]") == 3 and "[not attempted]" in out and "m nor d" in out


@pytest.mark.parametrize(("kernel", "says"), [
    (_online_zero_padding, r"loaded as 0"),
    (_online_no_rescale, "not rescaled when the running maximum grew"),
    (_scalar_no_rescale, "not rescaled when the running maximum grew"),
    (_online_lanes_summed, "added without rescaling"),
    (_online_no_guard, r"exp\(-inf - \(-inf\)\)"),
    (_online_unmasked_load, "mask=cols < n_cols"),
    (_online_n_cols_stride, "stride_x is not n_cols"),
    (_online_unmasked_store, "stored past column"),
    (_three_passes, "read each element of a row 3 times"),
    (_three_while_passes, "read each element of a row 3 times"),
    (_three_passes_in_a_helper, "read each element of a row 3 times"),
    (_passes_counted_by_range, "read each element of a row 3 times"),
    (_one_block_fused, "read each element of a row once"),
    (lambda x: torch.softmax(x, -1), "not a Triton kernel"),
])
def test_online_kernel_mistakes_are_named(kernel, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex06.check_online_kernel(kernel)


def test_online_kernel_loops_where_loads_cannot_be_counted():
    """Compiled (on a GPU) the checker counts loops, while loops and those of the helpers a
    kernel calls included."""
    assert ex06._loops(solutions.solution_online_kernel) == 2
    assert ex06._loops(_scalar_online) == 2
    assert ex06._loops(_three_while_passes) == 3
    assert ex06._loops(_three_passes_in_a_helper) == 3


def test_online_kernel_loads_are_counted_when_compiled(tmp_path):
    """On a GPU the learner's kernel is compiled (a JITFunction): the checker counts the loads
    of an interpreted twin of it (its helpers and ``tl.max``/``tl.sum`` twinned too), and
    leaves ``triton.language`` as it was, so a kernel compiled afterwards compiles to the same
    IR. Run in a Python whose Triton compiles (``TRITON_INTERPRET=0``), as on a GPU."""
    kernels = (_scalar_stats, _scalar_online, _three_passes, _three_passes_in_a_helper,
               _passes_counted_by_range, _one_block_fused, _methods_and_ranges)
    script = tmp_path / "compiled_kernels.py"
    script.write_text("""from triton.runtime import interpreter

unrepaired = interpreter._patch_lang_tensor
import teachkit

# as on a GPU, where importing teachkit leaves the interpreter alone (no repair of its loop
# bounds for Triton 3.6 under NumPy 2.4: the checker has to install it)
interpreter._patch_lang_tensor = unrepaired
import torch
import triton
import triton.language as tl
from teachkit.exercises import ex06
from teachkit.exercises.solutions import ex06 as solutions
from teachkit.kernels import compile_check as cc


""" + "\n\n".join(inspect.getsource(k.fn) for k in kernels) + """

config = next(c for c in cc.softmax_launch_configs() if c.name == "online fp32")
before = cc._compile(config, 90).asm["ttir"]
x = torch.randn(3, 1001, generator=torch.Generator().manual_seed(0))
kernels = {"solution": solutions.solution_online_kernel, "scalar": _scalar_online,
           "three": _three_passes, "helper": _three_passes_in_a_helper,
           "range": _passes_counted_by_range, "one block": _one_block_fused,
           "methods": _methods_and_ranges}
print({"kind": type(_scalar_online).__name__,
       "reads": {name: ex06._online_reads(k, x, ex06.ONLINE_BLOCK) for name, k in kernels.items()},
       "same IR": cc._compile(config, 90).asm["ttir"] == before})
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path,
                          env=dict(os.environ, TRITON_INTERPRET="0", TRITON_ALWAYS_COMPILE="1",
                                   TRITON_CACHE_DIR=str(tmp_path / "cache")))
    assert done.returncode == 0, done.stdout + done.stderr
    found = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert found == {"kind": "JITFunction", "same IR": True,
                     "reads": {"solution": 2, "scalar": 2, "three": 3, "helper": 3, "range": 3,
                               "one block": 1, "methods": 2}}, found


def test_online_kernel_rejects_the_library_kernel():
    from teachkit.kernels.softmax_kernels import online_kernel

    with pytest.raises(ExerciseFailed, match="the library's"):
        ex06.check_online_kernel(online_kernel)


# ---------------------------------------------------------------- exercise 4: resident rescale


def test_resident_rescale_accepts_solution(capsys):
    assert ex06.check_resident_rescale(solutions.solution_resident_rescale) is None
    assert "[correct]" in capsys.readouterr().out


def test_resident_rescale_hints_on_stub(capsys):
    assert ex06.check_resident_rescale(_stub) is None
    assert "largest chunk maximum" in capsys.readouterr().out


def _rescaled(e, m, d, shift_sum=True, shift_e=True, safe=False):
    m_row = m.amax(-1, keepdim=True)
    factor = torch.exp(m - m_row)
    d_row = (d * factor).sum(-1, keepdim=True) if shift_sum else d.sum(-1, keepdim=True)
    if safe:
        factor = torch.exp(torch.where(m == float("-inf"), torch.zeros_like(m), m) - m_row)
    return (e * factor[..., None] if shift_e else e) / d_row[..., None]


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"shift_e": False}, "multiply it by exp"),
    ({"shift_sum": False}, "not the plain sum"),
    ({"safe": True}, "0 \\* inf is NaN"),
])
def test_resident_rescale_explains_the_usual_mistakes(kwargs, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex06.check_resident_rescale(lambda e, m, d: _rescaled(e, m, d, **kwargs))


def test_resident_rescale_wants_the_chunks_shape():
    with pytest.raises(ExerciseFailed, match="shape"):
        ex06.check_resident_rescale(lambda e, m, d: _rescaled(e, m, d).flatten(1))


def test_chunk_statistics_match_the_kernel_rule():
    x = torch.tensor([[0.0, 1.0, float("-inf"), float("-inf"), 2.0, 2.0]], dtype=torch.float64)
    e, m, d = ex06.chunk_statistics(x, 2)
    assert m.tolist() == [[1.0, float("-inf"), 2.0]]
    assert d[0].tolist() == [1 + math.exp(-1), 0.0, 2.0]
    y = solutions.solution_resident_rescale(e, m, d).reshape(1, 6)
    assert torch.allclose(y, torch.softmax(x, -1))


# ------------------------------------------------------------ exercise 5: two floats in one word


def _packed(m, d, swap=False, mask=True, by_value=False):
    if by_value:
        hi, lo = m.to(torch.int64), d.to(torch.int64)
    else:
        hi, lo = m.view(torch.int32).to(torch.int64), d.view(torch.int32).to(torch.int64)
    if swap:
        hi, lo = lo, hi
    return (hi << 32) | (lo & 0xFFFFFFFF if mask else lo)


def test_pack_pair_accepts_the_solution_and_hints_on_a_stub(capsys):
    for fn in (solutions.solution_pack_pair, _stub):
        assert ex06.check_pack_pair(fn) is None
    said = capsys.readouterr().out
    assert "[correct] two floats in one word" in said
    assert "[not attempted] two floats in one word" in said and "Hint 1" in said
    assert ".view(" not in said  # the method is the hints' to give, not the first nudge's


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"swap": True}, "m belongs in the high half"),
    ({"mask": False}, "keep only the low 32 bits"),
    ({"by_value": True}, "not their values"),
])
def test_pack_pair_explains_the_usual_mistakes(kwargs, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex06.check_pack_pair(lambda m, d: _packed(m, d, **kwargs))


def test_pack_pair_wants_int64_words_of_the_pairs_shape():
    with pytest.raises(ExerciseFailed, match="int64 tensor of shape"):
        ex06.check_pack_pair(lambda m, d: _packed(m, d).to(torch.float64))
    with pytest.raises(ExerciseFailed, match="int64 tensor of shape"):
        ex06.check_pack_pair(lambda m, d: _packed(m, d).flatten()[:1])
    with pytest.raises(ExerciseFailed, match=r"words differ.*bits 0x.*where \(m bits << 32\) "
                       r"\| d bits is 0x[0-9a-f]{16}.*hints below"):
        ex06.check_pack_pair(lambda m, d: _packed(m, d) + 1)


def test_pack_pair_solution_is_the_kernel_s_word(gen):
    """The solution's words have the resident kernel's layout (m's bits high, d's low, as the
    kernels' test of pack_pair checks), and the all-ones pair packs to EMPTY_SLOT."""
    from teachkit.kernels.softmax_kernels import EMPTY_SLOT

    ones = torch.tensor([-1], dtype=torch.int32).view(torch.float32)
    assert solutions.solution_pack_pair(ones, ones).item() == EMPTY_SLOT.value
    m = torch.randn(64, generator=gen)
    d = torch.rand(64, generator=gen)
    words = solutions.solution_pack_pair(m, d)
    assert torch.equal((words >> 32).to(torch.int32), m.view(torch.int32))
    assert torch.equal(words.to(torch.int32), d.view(torch.int32))


# ---------------------------------------------------------------- exercise 6: halves of a word


@triton.jit
def _halves_stub(words):
    raise NotImplementedError


@triton.jit
def _halves_through_int16(words):  # the other right way, as the shipped halves reads float16
    low = words.to(tl.int16).to(tl.bfloat16, bitcast=True).to(tl.float32)
    high = (words >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True).to(tl.float32)
    return low, high


@triton.jit
def _halves_swapped(words):
    return (words & -65536).to(tl.float32, bitcast=True), (words << 16).to(tl.float32, bitcast=True)


@triton.jit
def _halves_by_value(words):
    return words.to(tl.float32), (words >> 16).to(tl.float32)


@triton.jit
def _halves_high_unmasked(words):
    return (words << 16).to(tl.float32, bitcast=True), words.to(tl.float32, bitcast=True)


@triton.jit
def _halves_low_unshifted(words):
    return ((words & 65535).to(tl.float32, bitcast=True),
            (words & -65536).to(tl.float32, bitcast=True))


@triton.jit
def _halves_calls_the_library(words):
    return softmax_kernels.halves(words, tl.bfloat16)


def test_halves_accepts_the_solution_and_the_int16_way(capsys):
    assert ex06.check_halves(solutions.solution_halves) is None
    assert ex06.check_halves(_halves_through_int16) is None
    assert capsys.readouterr().out.count("[correct]") == 2


def test_halves_hints_on_stub(capsys):
    assert ex06.check_halves(_halves_stub) is None
    said = capsys.readouterr().out
    assert "[not attempted]" in said and "hints below" in said and "bitcast" not in said


@triton.jit
def _halves_plus_one(words):
    return (words << 16).to(tl.float32, bitcast=True), (words & -65535).to(tl.float32,
                                                                         bitcast=True)


def test_halves_shows_the_bits_of_a_wrong_answer():
    with pytest.raises(ExerciseFailed, match=r"the word 0x[0-9a-f]{8}, gives low = .*\(0x"
                       r"[0-9a-f]{8}\).* where its elements are .*hints below"):
        ex06.check_halves(_halves_plus_one)


@pytest.mark.parametrize("fn, says", [
    (_halves_swapped, "swapped"),
    (_halves_by_value, "integer value converted"),
    (_halves_high_unmasked, "clear them with & -65536"),
    (_halves_low_unshifted, "shift them up"),
])
def test_halves_explains_the_usual_mistakes(fn, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex06.check_halves(fn)


def test_halves_wants_a_triton_function_and_not_the_library():
    with pytest.raises(ExerciseFailed, match="not a Triton function"):
        ex06.check_halves(lambda words: (words, words))
    with pytest.raises(ExerciseFailed, match="softmax_kernels.halves"):
        ex06.check_halves(_halves_calls_the_library)


# ---------------------------------------------------------------- exercise 7: writing behind


def _plain_order(items, publish, wait_row, write):
    for item in items:
        publish(item)
        wait_row(item)
        write(item)


def _all_published_first(items, publish, wait_row, write):
    for item in items:
        publish(item)
    for item in items:
        wait_row(item)
        write(item)


def _last_forgotten(items, publish, wait_row, write):
    publish(items[0])
    for before, item in zip(items[:-1], items[1:], strict=True):
        publish(item)
        wait_row(before)
        write(before)


def _waits_before_publishing(items, publish, wait_row, write):
    for item in items:
        wait_row(item)
        publish(item)
        write(item)


def _someone_elses_item(items, publish, wait_row, write):
    publish(items[0] + 1000)


def test_write_behind_accepts_solution(capsys):
    assert ex06.check_write_behind(solutions.solution_write_behind) is None
    assert capsys.readouterr().out == "[correct] writing behind\n"


def test_write_behind_hints_on_stub(capsys):
    assert ex06.check_write_behind(_stub) is None
    assert "[not attempted]" in capsys.readouterr().out


@pytest.mark.parametrize("fn, says", [
    (_plain_order, "plain order"),
    (_all_published_first, "holds 3 chunks"),
    (_last_forgotten, "missing"),
    (_waits_before_publishing, "wait for ever"),
    (_someone_elses_item, "this program's items are"),
])
def test_write_behind_explains_each_mistake(fn, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex06.check_write_behind(fn)


def test_write_behind_cannot_be_fooled_by_the_library():
    from teachkit.plots.write_behind import program_steps

    def copied(items, publish, wait_row, write):
        step = {"sum": publish, "wait": wait_row, "write": write}
        for kind, index in program_steps(len(items), True):
            step[kind](items[index])

    with pytest.raises(ExerciseFailed, match="program_steps"):
        ex06.check_write_behind(copied)
