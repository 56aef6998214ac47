r"""Ring attention: one sequence split across processes, key/value blocks passed around a ring.

Each of ``W`` workers holds ``N / W`` tokens of a sequence: their queries, keys and values. In
``W`` steps every key/value block visits every worker; each worker attends its queries to the
block in hand and merges the partial ``(out, lse)`` into its running result with the rule of
notebook 04, while the next block is already on its way. No worker ever holds more than two
key/value blocks, so the sequence a group of workers can attend over grows with ``W``.

=============  ==============================================================================
module         what it holds
=============  ==============================================================================
layout         which tokens a rank holds (contiguous or striped), which block it meets at each
               step and under which mask, the work per rank
attention      the ring loop of one rank (:func:`ring_attention`), the same loop for all ranks in
               one process (:func:`simulate_ring`, timed: :func:`ring_step_times`), one step
               and the in-place merge
launch         :func:`run_ring`: start ``W`` processes in a ``torch.distributed`` group (gloo on
               CPUs, NCCL with a GPU per rank), run a function, collect results or the error
workers        targets the spawned ranks run, and :func:`run_ring_attention` (whole sequences in,
               whole result out)
memory         bytes a worker holds against one device holding everything
bench          :func:`bench_ring`: the ring on several GPUs against one GPU
=============  ==============================================================================

Examples
--------
>>> import torch
>>> from teachkit.attention import naive_attention
>>> q, k, v = (torch.randn(1, 2, 12, 16, dtype=torch.float64) for _ in range(3))
>>> out, lse = simulate_ring(q, k, v, world_size=3, causal=True)
>>> torch.allclose(out, naive_attention(q, k, v, causal=True))
True
"""

from .attention import (
    BLOCK_ATTENTION,
    RankResult,
    attend_block,
    merge_partials_,
    ring_attention,
    ring_step,
    ring_step_times,
    simulate_ring,
)
from .bench import RingBench, bench_ring, ring_record_path, save_ring_bench
from .launch import RingContext, RingError, RingTimeout, choose_backend, run_ring
from .layout import (
    LAYOUTS,
    block_mask,
    local_length,
    positions,
    ring_schedule,
    ring_tiles,
    shard,
    source_rank,
    unshard,
)
from .memory import RingMemory, longest_sequence, ring_memory
from .workers import RingCase, RingRun, run_ring_attention, run_ring_attention_cases

__all__ = [
    "BLOCK_ATTENTION",
    "LAYOUTS",
    "RankResult",
    "RingBench",
    "RingCase",
    "RingContext",
    "RingError",
    "RingMemory",
    "RingRun",
    "RingTimeout",
    "attend_block",
    "bench_ring",
    "block_mask",
    "choose_backend",
    "local_length",
    "longest_sequence",
    "merge_partials_",
    "positions",
    "ring_attention",
    "ring_memory",
    "ring_record_path",
    "ring_schedule",
    "ring_step",
    "ring_step_times",
    "ring_tiles",
    "run_ring",
    "run_ring_attention",
    "run_ring_attention_cases",
    "save_ring_bench",
    "shard",
    "simulate_ring",
    "source_rank",
    "unshard",
]
