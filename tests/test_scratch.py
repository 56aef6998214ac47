"""Buffers kept per CUDA stream: the same key on one stream gives the same buffers, another
stream or a graph capture gives others, and off the GPU every call makes its own."""

from __future__ import annotations

import pytest
import torch

from teachkit.device import DEVICE, ON_GPU
from teachkit.kernels import scratch

gpu_only = pytest.mark.skipif(not ON_GPU, reason="streams need a GPU")


def test_off_the_gpu_every_call_makes_its_buffers():
    made = []

    def make():
        made.append(torch.empty(3))
        return made[-1]

    cpu = torch.device("cpu")
    assert scratch.stream_id(cpu) is None
    first, second = (scratch.stream_scratch(("t", 3), make, cpu) for _ in range(2))
    assert first is not second and len(made) == 2


@gpu_only
def test_one_stream_keeps_its_buffers_and_another_gets_its_own():
    device = torch.device(DEVICE)
    make = lambda: torch.empty(5, device=device)  # noqa: E731
    here = scratch.stream_scratch(("test kept", 5), make, device)
    assert scratch.stream_scratch(("test kept", 5), make, device) is here
    assert scratch.stream_scratch(("test kept", 6), make, device) is not here
    with torch.cuda.stream(torch.cuda.Stream()):
        assert scratch.stream_scratch(("test kept", 5), make, device) is not here


@gpu_only
def test_a_graph_capture_gets_fresh_buffers():
    device = torch.device(DEVICE)
    make = lambda: torch.zeros(4, device=device)  # noqa: E731
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        kept = scratch.stream_scratch(("test capture", 4), make, device)
    with torch.cuda.graph(graph, stream=stream):
        assert scratch.stream_id(device) is None
        captured = scratch.stream_scratch(("test capture", 4), make, device)
    assert captured is not kept


@gpu_only
def test_a_caller_that_has_asked_about_capture_is_taken_at_its_word():
    device = torch.device(DEVICE)
    make = lambda: torch.empty(2, device=device)  # noqa: E731
    kept = scratch.stream_scratch(("test told", 2), make, device, capturing=False)
    assert scratch.stream_scratch(("test told", 2), make, device) is kept
    assert scratch.stream_scratch(("test told", 2), make, device, capturing=True) is not kept
    assert scratch.stream_id(device, capturing=True) is None
    assert scratch.stream_id(device, capturing=False) == scratch.stream_id(device)


@gpu_only
def test_the_dictionary_stays_bounded(monkeypatch):
    device = torch.device(DEVICE)
    monkeypatch.setattr(scratch, "MAX_BUFFERS", 3)
    monkeypatch.setattr(scratch, "_KEPT", {})
    for n in range(10):
        scratch.stream_scratch(("test bound", n), lambda: torch.empty(1, device=device), device)
        assert len(scratch._KEPT) <= 3
