"""The small modules: device decision, input checks, relative error, numerics, source display."""

from __future__ import annotations

import os

import pytest
import torch

import teachkit
from teachkit import device, numerics
from teachkit.compare import describe_mismatch, relative_error
from teachkit.source import show_source
from teachkit.validation import normalize_dim, require_float_tensor


def test_world_is_decided_once():
    assert device.ON_GPU == torch.cuda.is_available()
    assert device.INTERPRETED == (not device.ON_GPU)
    if not device.ON_GPU:
        assert os.environ["TRITON_INTERPRET"] == "1"
    assert device.DEVICE.type == ("cuda" if device.ON_GPU else "cpu")
    assert device.pick(cpu=1, gpu=2) == (2 if device.ON_GPU else 1)
    assert "torch" in teachkit.describe()


def test_device_properties_are_read_once_per_gpu():
    with pytest.raises(ValueError, match="CUDA device"):
        device.compute_capability("cpu")
    if device.ON_GPU:
        assert device.compute_capability() == torch.cuda.get_device_capability()
        assert device.compute_capability("cuda:0") == torch.cuda.get_device_capability(0)
        props = torch.cuda.get_device_properties(0)
        assert device.multiprocessors(torch.device("cuda", 0)) == props.multi_processor_count


def test_relative_error_understands_nan_and_inf():
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0], dtype=torch.float64)
    assert relative_error(ref.float(), ref) == 0.0
    assert relative_error(torch.tensor([1.0, 0.0, float("inf"), 2.0]), ref) == float("inf")
    assert relative_error(torch.tensor([1.0, float("nan"), float("inf"), 2.2]), ref) == \
        pytest.approx(0.1)
    assert relative_error(torch.empty(0), torch.empty(0)) == 0.0
    with pytest.raises(ValueError, match="shapes differ"):
        relative_error(torch.ones(2), torch.ones(3))
    assert "NaN mismatch" in describe_mismatch(torch.tensor([float("nan")]), torch.tensor([1.0]))


def test_thresholds_are_exact_boundaries():
    for dtype, expected in [(torch.float32, 88.72), (torch.float16, 11.09), (torch.bfloat16, 88.5)]:
        t = numerics.overflow_threshold(dtype)
        assert round(t, 2) == expected
        x = torch.tensor(t, dtype=dtype)
        assert torch.isfinite(torch.exp(x))
        assert torch.isinf(torch.exp(torch.nextafter(x, torch.tensor(float("inf"), dtype=dtype))))
    u = numerics.underflow_threshold(torch.float32)
    assert torch.exp(torch.tensor(u)) > 0
    assert torch.exp(torch.nextafter(torch.tensor(u), torch.tensor(-1e9))) == 0
    with pytest.raises(TypeError):
        numerics.overflow_threshold(torch.int32)


def test_validation_messages():
    with pytest.raises(TypeError, match="x.float()"):
        require_float_tensor(torch.arange(3))
    with pytest.raises(TypeError, match="dim must be an int"):
        normalize_dim(torch.ones(3), 0.5)
    assert normalize_dim(torch.tensor(1.0), -1) == 0


def test_show_source_renders_code():
    src = show_source(teachkit.merge_stats)
    assert "def merge_stats" in src.text and "Merge the statistics" in src.text
    bare = show_source(teachkit.merge_stats, docstring=False)
    assert "Merge the statistics" not in bare.text and "torch.maximum" in bare.text
    assert bare._repr_markdown_().startswith("`teachkit.softmax.merge_stats`")
