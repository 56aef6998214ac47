"""A loop bound computed from ``tl.program_id``: Triton 3.6's interpreter under NumPy 2.4.

The interpreter holds a program id as a one-element array, and Triton 3.6 turns it into a Python
``int`` with ``int(array)``, which NumPy 2.4 refuses for any array that is not 0-d.
:func:`teachkit.device.repair_interpreter_index` wraps the interpreter so that the causal
kernels (whose key loop ends where the query block starts) run with any NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from teachkit.device import DEVICE, repair_interpreter_index

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _count_to_program_id(OUT):
    """Program ``i`` writes ``i + 1``, counted by a loop that ends at ``i + 1``."""
    pid = tl.program_id(0)
    total = pid * 0
    for _ in range(0, pid + 1):
        total += 1
    tl.store(OUT + pid, total)


def test_a_loop_may_end_at_a_bound_computed_from_the_program_id():
    out = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    _count_to_program_id[(4,)](out)
    assert out.tolist() == [1, 2, 3, 4]


def test_a_causal_kernel_runs():
    from teachkit.kernels import flash_attention

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=gen).to(DEVICE) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(flash_attention(q, k, v, causal=True), ref, atol=1e-5, rtol=1e-4)


def test_the_repair_is_made_once_and_only_for_numpy_from_2_4(monkeypatch):
    interpreter = pytest.importorskip("triton.runtime.interpreter")
    if not hasattr(interpreter, "_patch_lang_tensor"):
        pytest.skip("this Triton's interpreter is laid out differently")
    # whatever happens here, the interpreter gets its function back afterwards
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", interpreter._patch_lang_tensor)
    monkeypatch.setattr(np, "__version__", "2.3.5")
    assert repair_interpreter_index() is False
    monkeypatch.setattr(np, "__version__", "2.4.0")
    assert repair_interpreter_index() is True
    repaired = interpreter._patch_lang_tensor
    assert getattr(repaired, "repairs_index", False)
    assert repair_interpreter_index() is True
    assert interpreter._patch_lang_tensor is repaired  # not wrapped a second time
