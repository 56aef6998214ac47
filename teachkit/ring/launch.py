"""Start ``W`` processes that form a ``torch.distributed`` group, run one function in each, and
bring the results back: the launcher behind every multi-process run of the course.

:func:`run_ring` spawns ranks ``0 .. W-1`` (``torch.multiprocessing``'s ``spawn`` start method:
each is a fresh Python that imports :mod:`teachkit`, never the notebook's code). Each rank joins
the group through a file in a temporary folder (``file://`` rendezvous: no port to pick), with
the backend :func:`choose_backend` picks: NCCL with one GPU per rank when the machine has ``W``
GPUs, gloo otherwise. Then it calls the target ``target(ctx, **kwargs)`` with its
:class:`RingContext`, saves the return value with ``torch.save`` and reports on a queue.

Failures end the run, never hang it:

* a rank that raises reports its traceback; the parent stops the other ranks at once and raises
  :class:`RingError` naming that rank, with its traceback text;
* every collective and send/receive has the group's timeout (``timeout_s``): a rank left waiting
  for a peer that is stuck raises after that long, and that error ends the run as above;
* the parent also has a hard wall-clock limit (``wall_s``): past it, it kills every rank and raises
  :class:`RingTimeout`; a rank that dies without reporting (killed, crashed in native code) is
  reported by its exit code.
"""

from __future__ import annotations

import datetime
import importlib
import os
import queue as queue_module
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..device import ON_GPU
from ..validation import require_positive_int

__all__ = ["RingContext", "RingError", "RingTimeout", "choose_backend", "run_ring"]

BACKENDS = ("gloo", "nccl")
_GRACE_S = 2.0
"""How long a rank that exited may take for its message to arrive, and ranks to stop."""


@dataclass(frozen=True)
class RingContext:
    """What a target learns about its place in the group.

    Attributes
    ----------
    rank, world_size : int
        This process's rank and the number of ranks.
    backend : str
        ``"gloo"`` or ``"nccl"``.
    device : torch.device
        Where this rank computes: its own GPU under NCCL, a GPU shared by several ranks under
        gloo on a machine with fewer GPUs than ranks, else the CPU.
    comm_device : torch.device
        Where tensors must be to be sent: the GPU under NCCL, the CPU under gloo.
    """

    rank: int
    world_size: int
    backend: str
    device: torch.device
    comm_device: torch.device


class RingError(RuntimeError):
    """A rank of :func:`run_ring` failed; ``rank`` says which and ``remote_traceback`` how."""

    def __init__(self, message: str, rank: int | None = None, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


class RingTimeout(RingError, TimeoutError):
    """:func:`run_ring` reached its wall-clock limit; the ranks were killed."""


def choose_backend(world_size: int, backend: str | None = None) -> str:
    """The backend for a ring of ``world_size`` ranks: ``backend`` if given (and possible), else
    NCCL when there is a GPU per rank, else gloo.

    Examples
    --------
    >>> import teachkit
    >>> choose_backend(2) == ("nccl" if teachkit.ON_GPU and torch.cuda.device_count() >= 2
    ...                       else "gloo")
    True
    """
    require_positive_int(world_size, "world_size")
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if ON_GPU else 0
    if backend is None:
        return "nccl" if gpus >= world_size and dist.is_nccl_available() else "gloo"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None (choose), got {backend!r}")
    if backend == "nccl" and (gpus < world_size or not dist.is_nccl_available()):
        raise ValueError(
            f"NCCL needs one GPU per rank: {world_size} ranks, and this machine has {gpus} usable "
            f"GPU(s){'' if dist.is_nccl_available() else ' and a torch without NCCL'}; pass "
            "backend='gloo' (CPU processes) or fewer ranks"
        )
    return backend


def _target_spec(target: str | Callable[..., Any]) -> str:
    """``"module:qualname"`` of a target the spawned processes can import, or ``TypeError``."""
    if isinstance(target, str):
        spec = target if ":" in target else ":".join(target.rsplit(".", 1))
    elif callable(target):
        module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
        if module in (None, "__main__") or "<" in qualname:
            raise TypeError(
                f"run_ring starts fresh processes that import the target by name, so it must be a "
                f"function defined at the top level of an importable module (e.g. in teachkit), "
                f"not {module}.{qualname} (notebook code, a lambda or a nested function); "
                "pass e.g. teachkit.ring.workers.attention_cases"
            )
        spec = f"{module}:{qualname}"
    else:
        raise TypeError(f"target must be a function or 'module:function', got {type(target)}")
    _load_target(spec)  # fail here, in the parent, if it cannot be found
    return spec


def _load_target(spec: str) -> Callable[..., Any]:
    module_name, _, qualname = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as err:
        raise TypeError(f"cannot import the target {spec!r}: {err}") from err
    if not callable(obj):
        raise TypeError(f"the target {spec!r} is not callable")
    return obj


def _devices(rank: int, backend: str) -> tuple[torch.device, torch.device]:
    """``(compute device, communication device)`` of a rank."""
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        return device, device
    if ON_GPU:  # gloo sends CPU tensors; the ranks share the GPUs there are for computing
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device, torch.device("cpu")
    return torch.device("cpu"), torch.device("cpu")


def _worker(rank: int, world_size: int, backend: str, init_method: str, spec: str,
            kwargs: dict[str, Any], result_dir: str, timeout_s: float, messages: Any) -> None:
    """The body of one spawned rank (module level, so that ``spawn`` can find it)."""
    import torch.distributed as dist

    try:
        device, comm_device = _devices(rank, backend)
        if device.type == "cpu":  # share the cores instead of every rank using all of them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        options: dict[str, Any] = {}
        if backend == "nccl":
            options["device_id"] = device
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s), **options)
        ctx = RingContext(rank, world_size, backend, device, comm_device)
        result = _load_target(spec)(ctx, **kwargs)
        torch.save(result, Path(result_dir) / f"rank{rank}.pt")
        dist.barrier()  # every rank done before any tears the group down
        messages.put(("done", rank, "", ""))
    except BaseException as err:  # report anything, then leave at once: peers may be stuck
        messages.put(("error", rank, f"{type(err).__name__}: {err}", traceback.format_exc()))
        messages.close()
        messages.join_thread()
        os._exit(1)
    messages.close()
    messages.join_thread()
    dist.destroy_process_group()


def _stop(procs: list[Any]) -> None:
    """Terminate the ranks still running (SIGTERM, then SIGKILL) and reap them all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + _GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _collect(procs: list[Any], messages: Any, wall_s: float, grace_s: float = _GRACE_S) -> None:
    """Wait until every rank reported done; raise on the first error, death or the deadline.

    A rank whose process exited is given ``grace_s`` for its message to arrive before it is
    reported as dead without one."""
    world_size = len(procs)
    deadline = time.monotonic() + wall_s
    done: set[int] = set()
    dead_since: dict[int, float] = {}
    while len(done) < world_size:
        now = time.monotonic()
        if now >= deadline:
            missing = [r for r in range(world_size) if r not in done]
            raise RingTimeout(
                f"the ring of {world_size} processes ran past its wall-clock limit of "
                f"{wall_s:g} s; rank(s) {missing} had not finished and were stopped. A rank is "
                "stuck (waiting for a peer, or computing for longer than expected): look for it, "
                "or pass a larger wall_s if the work is just long"
            )
        try:
            kind, rank, summary, remote_tb = messages.get(timeout=min(0.25, deadline - now))
        except queue_module.Empty:
            for r, p in enumerate(procs):
                if r in done or p.exitcode is None:
                    continue
                first = dead_since.setdefault(r, now)
                if now - first > grace_s:
                    raise RingError(
                        f"rank {r} of {world_size} exited with code {p.exitcode} without "
                        "reporting a result or an error (killed, out of memory, or crashed in "
                        "native code)", rank=r) from None
            continue
        if kind == "error":
            others = [r for r in range(world_size) if r != rank and r not in done]
            raise RingError(
                f"rank {rank} of {world_size} failed: {summary}\n(the other ranks {others} were "
                f"stopped)\n\nTraceback in rank {rank}:\n{remote_tb}",
                rank=rank, remote_traceback=remote_tb)
        done.add(rank)


def run_ring(
    target: str | Callable[..., Any], world_size: int, kwargs: dict[str, Any] | None = None,
    backend: str | None = None, timeout_s: float = 60.0, wall_s: float | None = None,
) -> list[Any]:
    """Run ``target(ctx, **kwargs)`` in ``world_size`` new processes joined in one group.

    Parameters
    ----------
    target : callable or str
        A function defined at the top level of an importable module (e.g.
        :func:`teachkit.ring.workers.attention_cases`), or its name ``"module:function"``. It
        receives a :class:`RingContext` and ``kwargs`` and returns something ``torch.save`` can
        write (tensors, numbers, strings, lists, dicts).
    world_size : int
        Number of ranks ``W``.
    kwargs : dict, optional
        Passed to every rank (tensors are shared with the processes, not copied per rank).
    backend : str, optional
        ``"gloo"`` or ``"nccl"``; default :func:`choose_backend`.
    timeout_s : float
        Timeout of every collective and send/receive of the group, in seconds.
    wall_s : float, optional
        Hard limit on the whole run, start-up included; default ``timeout_s + 60``.

    Returns
    -------
    list
        What each rank returned, in rank order.

    Raises
    ------
    RingError
        A rank raised (its rank, error and traceback are in the message) or died.
    RingTimeout
        The run took longer than ``wall_s``; every rank was killed.

    Examples
    --------
    Starting processes takes seconds, so this example is skipped by the doctests
    (``tests/test_ring.py`` runs such calls):

    >>> out = run_ring("teachkit.ring.workers:describe_rank", world_size=2)  # doctest: +SKIP
    >>> [(r["rank"], r["backend"], r["rank_sum"]) for r in out]  # doctest: +SKIP
    [(0, 'gloo', 1), (1, 'gloo', 1)]
    """
    spec = _target_spec(target)
    require_positive_int(world_size, "world_size")
    backend = choose_backend(world_size, backend)
    for value, name in ((timeout_s, "timeout_s"), (wall_s, "wall_s")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value > 0):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    wall_s = float(wall_s) if wall_s is not None else float(timeout_s) + 60.0
    ctx = torch.multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="teachkit-ring-") as tmp:
        messages = ctx.Queue()
        procs = [ctx.Process(target=_worker, name=f"teachkit-ring-rank{rank}", daemon=True,
                             args=(rank, world_size, backend, f"file://{tmp}/rendezvous", spec,
                                   kwargs or {}, tmp, float(timeout_s), messages))
                 for rank in range(world_size)]
        try:
            for p in procs:
                p.start()
            _collect(procs, messages, wall_s)
            for p in procs:  # done: let them leave the group on their own
                p.join(_GRACE_S)
        finally:
            _stop(procs)
            messages.close()
            messages.cancel_join_thread()
        return [torch.load(Path(tmp) / f"rank{rank}.pt", weights_only=False)
                for rank in range(world_size)]
