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
  :class:`RingError` naming that rank, with its traceback text. When several ranks fail, the
  error names the root cause: a rank whose own code failed, else one that died without a word,
  and lists the ranks that then failed waiting for it (timeouts, closed connections);
* every collective and send/receive has the group's timeout (``timeout_s``): a rank left waiting
  for a peer that is stuck raises after that long, and that error ends the run as above;
* the parent also has a hard wall-clock limit (``wall_s``): past it, it kills every rank and raises
  :class:`RingTimeout`; a rank that dies without reporting (killed, crashed in native code) is
  reported by its exit code.

No rank outlives its parent, and the temporary folder goes with the run: whether it returns or
raises, is interrupted (Ctrl-C, ``SIGINT``) or is asked to terminate (``SIGTERM``, ``SIGHUP``:
while the ranks run, the parent notes the signal, stops the ranks, removes the folder, then lets
the signal do what it did before, by default end the process). A parent killed outright
(``SIGKILL``) cannot clean up, but its ranks still end at once: each asks Linux to kill it when its
parent dies (``PR_SET_PDEATHSIG``) and, on any system, watches its parent and leaves when it is
gone.
"""

from __future__ import annotations

import ctypes
import datetime
import importlib
import inspect
import io
import math
import multiprocessing
import multiprocessing.connection
import numbers
import os
import pickle
import queue as queue_module
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..device import ON_GPU
from ..validation import require_positive_int

__all__ = ["MAX_SECONDS", "RingContext", "RingError", "RingTimeout", "choose_backend",
           "run_ring"]

BACKENDS = ("gloo", "nccl")
_GRACE_S = 2.0
"""How long a rank that exited may take for its message to arrive, ranks to stop, and the others
to report after a rank failed waiting for a peer (so that the root cause can be named)."""
MAX_SECONDS = 7 * 24 * 3600.0
"""The longest ``timeout_s`` and ``wall_s`` :func:`run_ring` takes: a week."""
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
"""Signals that ask the parent to end: while the ranks run, it stops them and cleans up first."""
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PEER_FAILURE_MARKS = ("gloo", "NCCL", "Timed out", "timed out", "Connection closed",
                       "Connection reset", "connection reset", "Broken pipe", "ProcessGroup",
                       "c10d", "Socket Timeout")
"""Text of the errors a rank gets when a peer is stuck or gone (its own code did not fail)."""


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
    """A rank of :func:`run_ring` failed; ``rank`` says which and ``remote_traceback`` how.

    Attributes
    ----------
    rank : int or None
        The root cause: the first rank whose own code failed; else a rank that died without a
        word; else the first rank that failed waiting for a peer (then ``stuck`` lists the
        ranks that never answered).
    remote_traceback : str
        That rank's traceback (empty for a rank that died without reporting).
    failures : dict of int to str
        Every rank that reported an error, with its one-line summary, in the order they came.
    stuck : list of int
        Ranks still running without a report when the run was stopped (stuck, or slow).
    """

    def __init__(self, message: str, rank: int | None = None, remote_traceback: str = "",
                 failures: dict[int, str] | None = None, stuck: list[int] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback
        self.failures = dict(failures or {})
        self.stuck = list(stuck or [])


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


def _target_spec(target: str | Callable[..., Any]) -> tuple[str, Callable[..., Any]]:
    """``"module:qualname"`` of a target the spawned processes can import, and the target itself;
    or ``TypeError``."""
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
    return spec, _load_target(spec)  # fail here, in the parent, if it cannot be found


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


def _require_seconds(value: object, name: str) -> float:
    """``value`` as a float number of seconds in ``(0, MAX_SECONDS]``, or ``TypeError`` /
    ``ValueError`` saying what to pass."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} "
                        f"{value!r}; pass e.g. {name}=60")
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise ValueError(f"{name} must be a positive number of seconds, finite and at most "
                         f"{MAX_SECONDS:g} (a week), got {value!r}; pass e.g. {name}=60")
    return seconds


def _require_kwargs(kwargs: object, spec: str, fn: Callable[..., Any]) -> dict[str, Any]:
    """``kwargs`` as a dict the target accepts after its context, or ``TypeError``."""
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError(f"kwargs must be a dict of keyword arguments (str keys) for the target, "
                        f"got {type(kwargs).__name__}; pass e.g. {{'rank': 1}} or None")
    kwargs = dict(kwargs)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to check (a builtin): the ranks will tell
        return kwargs
    try:
        signature.bind(None, **kwargs)
    except TypeError as err:
        raise TypeError(f"kwargs do not fit the target {spec}{signature}: {err}; pass the "
                        "keyword arguments it takes after its RingContext") from None
    return kwargs


class _Probe(pickle.Pickler):
    """Pickles into nothing, to find what cannot be pickled (tensors are skipped: the ranks get
    them through shared memory) and which classes or functions live in ``__main__``."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.main_objects: list[str] = []

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.requires_grad and not obj.is_leaf:
            raise TypeError("a tensor computed with autograd (requires_grad, not a leaf) "
                            "cannot cross process boundaries; pass t.detach()")
        return 0 if isinstance(obj, (torch.Tensor, torch.UntypedStorage)) else None

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) or inspect.isfunction(obj):
            if getattr(obj, "__module__", None) == "__main__":
                self.main_objects.append(getattr(obj, "__qualname__", repr(obj)))
        return NotImplemented


def _unpicklable(kwargs: dict[str, Any]) -> TypeError | None:
    """A ``TypeError`` naming the first kwarg that cannot be pickled (``None`` if each can)."""
    for name, value in kwargs.items():
        try:
            _Probe().dump(value)
        except Exception as probe_err:  # any failure to pickle is the answer
            return TypeError(
                f"kwargs[{name!r}] cannot be sent to the spawned ranks, which receive their "
                f"arguments pickled: {type(probe_err).__name__}: {probe_err}; pass values "
                "pickle can copy: tensors, numbers, strings, lists, dicts, and objects of classes "
                "defined at the top level of a module (no locks, open files, lambdas or nested "
                "functions)")
    return None


def _main_objects(kwargs: dict[str, Any]) -> str:
    """A hint naming the kwargs that hold classes or functions of ``__main__``, if any."""
    found = []
    for name, value in kwargs.items():
        probe = _Probe()
        try:
            probe.dump(value)
        except Exception:  # only the __main__ references matter here (found until it failed)
            pass
        found += [f"kwargs[{name!r}] holds __main__.{obj}" for obj in probe.main_objects]
    if not found:
        return ""
    return ("; " + ", ".join(found) + " (defined in the notebook or script, which a spawned "
            "rank does not run: define it in an importable module)")


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


def _die_with_parent() -> None:
    """Make this rank end when the process that started it ends, however that ends.

    On Linux the kernel kills the rank when its parent dies (``PR_SET_PDEATHSIG``); on every
    system a watchdog thread waits on the pipe whose other end only the parent holds, and leaves
    when it closes (it also covers a parent that died before the first call took effect).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0))
        except (OSError, AttributeError):  # no prctl: the watchdog alone
            pass
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        threading.Thread(target=_leave_with, args=(parent.sentinel,), daemon=True,
                         name="teachkit-ring-watchdog").start()


def _leave_with(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])  # returns when the parent has gone
    os._exit(1)


def _waited_for_a_peer(err: BaseException) -> bool:
    """Whether ``err`` is what a rank gets when a peer is stuck or gone (a timeout, a closed
    connection), rather than a failure of its own code."""
    import torch.distributed as dist

    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    return (isinstance(err, (RuntimeError, TimeoutError, ConnectionError))
            and any(mark in str(err) for mark in _PEER_FAILURE_MARKS))


def _worker(rank: int, world_size: int, backend: str, init_method: str, spec: str,
            kwargs: dict[str, Any], result_dir: str, timeout_s: float, messages: Any) -> None:
    """The body of one spawned rank (module level, so that ``spawn`` can find it).

    It reports ``("started" | "done" | "error" | "waited", rank, summary, traceback)`` on
    ``messages``: ``"waited"`` is an error that says a peer is stuck or gone (see
    :func:`_waited_for_a_peer`), ``"error"`` any other.
    """
    import torch.distributed as dist

    try:
        _die_with_parent()
        messages.put(("started", rank, "", ""))
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
        kind = "waited" if _waited_for_a_peer(err) else "error"
        messages.put((kind, rank, f"{type(err).__name__}: {err}", traceback.format_exc()))
        messages.close()
        messages.join_thread()
        os._exit(1)
    messages.close()
    messages.join_thread()
    dist.destroy_process_group()


def _stop(procs: list[Any]) -> None:
    """Terminate the ranks still running (SIGTERM, then SIGKILL) and reap them all; ranks that
    never started (their arguments could not be sent) are skipped."""
    started = [p for p in procs if p.pid is not None]
    for p in started:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + _GRACE_S
    for p in started:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


class _Stopped(BaseException):
    """Raised in the parent when it was asked to end (a signal of :data:`_SIGNALS`)."""


def _short(summary: str, limit: int = 300) -> str:
    line = " ".join(summary.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _died_message(rank: int, world_size: int, exitcode: int, started: bool, hint: str) -> str:
    text = f"rank {rank} of {world_size} exited with code {exitcode} without reporting"
    if started:
        return text + (" a result or an error (killed, out of memory, or crashed in native "
                       "code)")
    if exitcode != 1:
        return text + (", before it started the target (killed, out of memory, or crashed in "
                       "native code while Python started and unpickled its arguments)")
    return text + (", before it started the target: the new Python process could not start or "
                   "could not unpickle its arguments (its traceback went to the standard error "
                   "of this process). Usual causes: kwargs that hold an object defined in the "
                   "notebook or script (__main__), or a script that starts the ring without "
                   f"`if __name__ == \"__main__\":`{hint}")


def _ring_error(procs: list[Any], errors: dict[int, tuple[str, str, str]], done: set[int],
                started: set[int], hint: Callable[[], str] | None) -> RingError:
    """The error that ends a run, naming its root cause (see :class:`RingError`)."""
    world_size = len(procs)
    dead = [r for r in range(world_size)
            if r not in done and r not in errors and procs[r].exitcode is not None]
    stuck = [r for r in range(world_size)
             if r not in done and r not in errors and r not in dead]
    own = [r for r, (kind, _, _) in errors.items() if kind == "error"]
    failures = {r: summary for r, (_, summary, _) in errors.items()}
    remote_tb = ""
    if own:
        root = own[0]
        _, summary, remote_tb = errors[root]
        message = f"rank {root} of {world_size} failed: {summary}"
    elif dead:
        root = dead[0]
        message = _died_message(root, world_size, procs[root].exitcode, root in started,
                                hint() if hint and root not in started else "")
    else:
        root = next(iter(errors))
        _, summary, remote_tb = errors[root]
        message = f"rank {root} of {world_size} failed: {summary}"
    notes = []
    after = [r for r in errors if r != root]
    if after:
        notes.append(f"rank(s) {after} failed too: " + "; ".join(
            f"rank {r}: {_short(errors[r][1])}" for r in after))
    others_dead = [r for r in dead if r != root]
    if others_dead:
        notes.append(f"rank(s) {others_dead} exited without reporting")
    if stuck and root in errors and errors[root][0] == "waited" and not own:
        notes.append(f"rank(s) {stuck} reported nothing: stuck, or slower than timeout_s; the "
                     f"rank(s) {list(errors)} timed out or lost their connection waiting for "
                     "them. They were stopped")
    elif stuck:
        notes.append(f"the other ranks {stuck} were stopped")
    text = message + "".join(f"\n({note})" for note in notes)
    if remote_tb:
        text += f"\n\nTraceback in rank {root}:\n{remote_tb}"
    return RingError(text, rank=root, remote_traceback=remote_tb, failures=failures,
                     stuck=stuck)


def _collect(procs: list[Any], messages: Any, wall_s: float, grace_s: float = _GRACE_S,
             stop: Callable[[], bool] | None = None,
             hint: Callable[[], str] | None = None) -> None:
    """Wait until every rank reported done; raise on an error, a death or the deadline.

    A rank whose process exited is given ``grace_s`` for its message to arrive before it is
    reported as dead without one. After a rank failed waiting for a peer, the others get up to
    ``grace_s`` to report, so that the error names the root cause (:func:`_ring_error`). ``stop``
    is polled several times a second (it raises :class:`_Stopped` when true); ``hint`` adds to
    the message of a rank that died before it started."""
    world_size = len(procs)
    deadline = time.monotonic() + wall_s
    done: set[int] = set()
    started: set[int] = set()
    errors: dict[int, tuple[str, str, str]] = {}  # rank -> (kind, summary, traceback)
    dead_since: dict[int, float] = {}
    settle_until = math.inf  # after a first error: how long the others may take to report

    def receive(kind: str, rank: int, summary: str, remote_tb: str) -> None:
        nonlocal settle_until
        if kind == "started":
            started.add(rank)
        elif kind == "done":
            done.add(rank)
        elif rank not in errors:
            errors[rank] = (kind, summary, remote_tb)
            settle_until = min(settle_until, time.monotonic() + grace_s)

    def drain() -> None:
        while True:
            try:
                receive(*messages.get_nowait())
            except queue_module.Empty:
                return

    while len(done) < world_size:
        now = time.monotonic()
        if stop is not None and stop():
            raise _Stopped
        if errors:
            pending = [r for r in range(world_size) if r not in done and r not in errors
                       and procs[r].exitcode is None]
            if (any(kind == "error" for kind, _, _ in errors.values()) or not pending
                    or now >= settle_until or now >= deadline):
                drain()
                raise _ring_error(procs, errors, done, started, hint)
        if now >= deadline:
            missing = [r for r in range(world_size) if r not in done]
            raise RingTimeout(
                f"the ring of {world_size} processes ran past its wall-clock limit of "
                f"{wall_s:g} s; rank(s) {missing} had not finished and were stopped. A rank is "
                "stuck (waiting for a peer, or computing for longer than expected): look for it, "
                "or pass a larger wall_s if the work is just long", stuck=missing)
        try:
            message = messages.get(timeout=max(0.0, min(0.25, deadline - now,
                                                         settle_until - now)))
        except queue_module.Empty:
            for r, p in enumerate(procs):
                if r in done or r in errors or p.exitcode is None:
                    continue
                first = dead_since.setdefault(r, now)
                if now - first > grace_s and not errors:
                    drain()  # its message may have come meanwhile
                    if r not in done and r not in errors:
                        raise _ring_error(procs, errors, done, started, hint) from None
            continue
        receive(*message)


class _SignalGuard:
    """While the ranks run, :data:`_SIGNALS` are noted instead of obeyed, so that the ranks are
    stopped and the folder removed first; :meth:`deliver` then hands the signal to the handler
    there was before. Only the main thread can set handlers; elsewhere this does nothing (the
    ranks still end with their parent)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                old = signal.getsignal(signum)
                if old is signal.SIG_IGN or old is None:  # ignored, or set outside Python
                    continue
                signal.signal(signum, self._note)
                self.previous[signum] = old
        return self

    def _note(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum

    def __exit__(self, *exc: object) -> None:
        for signum, old in self.previous.items():
            signal.signal(signum, old)

    def deliver(self) -> None:
        """Give the noted signal to the previous handler: the default ends the process with the
        signal's status; a Python handler is called (and may raise)."""
        signum = self.received
        if signum is None:
            return
        old = self.previous[signum]
        if callable(old):
            old(signum, None)
            return
        os.kill(os.getpid(), signum)  # the default action: end this process, by this signal
        time.sleep(1.0)  # it is delivered at once; this only waits for it
        raise SystemExit(128 + signum)


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
        Passed to every rank (tensors are shared with the processes, not copied per rank; every
        other value is pickled, so it must be picklable and importable by a fresh process).
    backend : str, optional
        ``"gloo"`` or ``"nccl"``; default :func:`choose_backend`.
    timeout_s : float
        Timeout of every collective and send/receive of the group, in seconds (finite, positive,
        at most :data:`MAX_SECONDS`).
    wall_s : float, optional
        Hard limit on the whole run, start-up included; default ``timeout_s + 60`` (finite,
        positive, at most :data:`MAX_SECONDS`).

    Returns
    -------
    list
        What each rank returned, in rank order.

    Raises
    ------
    TypeError
        A target the ranks cannot import, kwargs that do not fit it or cannot be pickled (the
        message names the argument), or a timeout that is not a number.
    ValueError
        A bad ``world_size`` or ``backend``, or a timeout that is not finite and positive.
    RingError
        A rank raised (its rank, error and traceback are in the message) or died. With several
        failures, ``rank`` is the root cause and ``failures`` lists them all.
    RingTimeout
        The run took longer than ``wall_s``; every rank was killed.

    Notes
    -----
    On every way out (a result, an error, Ctrl-C, ``SIGTERM`` or ``SIGHUP``) no rank is left
    running and the temporary folder is removed before ``run_ring`` returns or the signal takes
    effect. See the module's introduction.

    Examples
    --------
    Starting processes takes seconds, so this example is skipped by the doctests
    (``tests/test_ring.py`` runs such calls):

    >>> out = run_ring("teachkit.ring.workers:describe_rank", world_size=2)  # doctest: +SKIP
    >>> [(r["rank"], r["backend"], r["rank_sum"]) for r in out]  # doctest: +SKIP
    [(0, 'gloo', 1), (1, 'gloo', 1)]
    """
    spec, fn = _target_spec(target)
    require_positive_int(world_size, "world_size")
    backend = choose_backend(world_size, backend)
    timeout_s = _require_seconds(timeout_s, "timeout_s")
    wall_s = (_require_seconds(wall_s, "wall_s") if wall_s is not None
              else min(timeout_s + 60.0, MAX_SECONDS))
    kwargs = _require_kwargs(kwargs, spec, fn)
    guard = _SignalGuard()
    try:
        with guard:
            try:
                return _run(spec, world_size, backend, kwargs, timeout_s, wall_s,
                            stop=lambda: guard.received is not None)
            except _Stopped:
                pass
    finally:
        guard.deliver()  # after the clean-up; the default action ends the process here
    name = signal.Signals(guard.received).name if guard.received else "a signal"
    raise RingError(f"run_ring was stopped by {name}; its ranks were stopped and its temporary "
                    "folder removed")


def _run(spec: str, world_size: int, backend: str, kwargs: dict[str, Any], timeout_s: float,
         wall_s: float, stop: Callable[[], bool]) -> list[Any]:
    """Start the ranks, collect their results, and clean up on every way out."""
    ctx = torch.multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="teachkit-ring-", ignore_cleanup_errors=True) as tmp:
        messages = ctx.Queue()
        procs = [ctx.Process(target=_worker, name=f"teachkit-ring-rank{rank}", daemon=True,
                             args=(rank, world_size, backend, f"file://{tmp}/rendezvous", spec,
                                   kwargs, tmp, timeout_s, messages))
                 for rank in range(world_size)]
        try:
            for p in procs:
                try:
                    p.start()
                except OSError:
                    raise
                except Exception as err:  # pickling the arguments failed: no process
                    unpicklable = _unpicklable(kwargs)
                    if unpicklable is None:
                        raise
                    raise unpicklable from err
            _collect(procs, messages, wall_s, stop=stop, hint=lambda: _main_objects(kwargs))
            for p in procs:  # done: let them leave the group on their own
                p.join(_GRACE_S)
        finally:
            _stop(procs)
            messages.close()
            messages.cancel_join_thread()
        if stop():
            raise _Stopped
        return [torch.load(Path(tmp) / f"rank{rank}.pt", weights_only=False)
                for rank in range(world_size)]
