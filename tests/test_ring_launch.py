"""The launcher's guarantees: bad arguments fail before any process starts, with an error that
names them; the error of a failed run names the rank at its root; and no rank outlives the
parent, whatever ends it (a result, an error, SIGTERM, even SIGKILL), nor does the temporary
folder, except after a SIGKILL."""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from teachkit.ring import RingCase, RingError, launch, run_ring, run_ring_attention_cases, workers

TESTS = Path(__file__).resolve().parent
POSIX = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


# --- arguments, checked in the parent ---------------------------------------------------------


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -1.0, 1e9])
@pytest.mark.parametrize("name", ["timeout_s", "wall_s"])
def test_timeouts_must_be_finite_and_positive(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be a positive number of seconds.*"
                                         rf"pass e\.g\. {name}=60"):
        run_ring(workers.describe_rank, 2, **{name: value})


@pytest.mark.parametrize("value", ["60", True, [60]])
def test_timeouts_must_be_numbers(value):
    with pytest.raises(TypeError, match="timeout_s must be a number of seconds"):
        run_ring(workers.describe_rank, 2, timeout_s=value)
    with pytest.raises(TypeError, match="timeout_s must be a number of seconds"):
        run_ring_attention_cases([], 2, timeout_s=value)


@pytest.fixture
def own_temp(tmp_path, monkeypatch):
    """The folder run_ring makes its temporary folder in, for this test only."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_unpicklable_kwargs_are_named_before_any_rank_starts(own_temp):
    start = time.monotonic()
    with pytest.raises(TypeError, match=r"kwargs\['message'\] cannot be sent to the spawned "
                                        r"ranks.*_thread.lock") as info:
        run_ring(workers.fail_on_rank, 2, {"rank": 1, "message": threading.Lock()})
    assert time.monotonic() - start < 5  # no rank was started, none waited for
    assert "can only join a started process" not in str(info.value)
    assert info.value.__cause__ is not None  # the pickling error itself, kept as the cause
    with pytest.raises(TypeError, match=r"kwargs\['rank'\].*lambda"):
        run_ring(workers.fail_on_rank, 2, {"rank": lambda: 1})
    grad = torch.ones(2, requires_grad=True) * 2
    with pytest.raises(TypeError, match=r"kwargs\['message'\].*pass t.detach\(\)"):
        run_ring(workers.fail_on_rank, 2, {"message": [grad]})
    assert list(own_temp.iterdir()) == []


def test_a_failed_run_leaves_no_rank_and_no_folder(own_temp):
    with pytest.raises(RingError, match="rank 0 of 2 failed: ValueError") as info:
        run_ring(workers.fail_on_rank, 2, {"rank": 0}, timeout_s=30)
    assert info.value.rank == 0
    assert list(own_temp.iterdir()) == []
    assert [p for p in multiprocessing.active_children() if p.name.startswith("teachkit")] == []


def test_kwargs_must_fit_the_target():
    with pytest.raises(TypeError, match=r"kwargs do not fit the target "
                                        r"teachkit.ring.workers:describe_rank\(ctx"):
        run_ring(workers.describe_rank, 2, {"rank": 1})
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        run_ring(workers.describe_rank, 2, [("rank", 1)])
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        run_ring(workers.describe_rank, 2, {1: "rank"})


def test_ring_cases_are_checked_before_any_rank_starts():
    q = torch.zeros(1, 1, 8, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match="cases must be a list of RingCase"):
        run_ring_attention_cases(RingCase(q, q, q), 2)
    with pytest.raises(TypeError, match=r"must hold RingCase objects, got tuple at cases\[0\]"):
        run_ring_attention_cases([(q, q, q)], 2)
    with pytest.raises(TypeError, match="k must be a .* tensor, got list"):
        run_ring_attention_cases([RingCase(q, [1], q)], 2)
    with pytest.raises(ValueError, match="repeats must be a positive int"):
        run_ring_attention_cases([RingCase(q, q, q, repeats=0)], 2)
    with pytest.raises(TypeError, match="causal must be True or False"):
        run_ring_attention_cases([RingCase(q, q, q, causal="yes")], 2)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        run_ring_attention_cases([RingCase(q, q, q, scale=math.nan)], 2)
    with pytest.raises(ValueError, match="block_attention must be one of"):
        run_ring_attention_cases([RingCase(q, q, q, block_attention="cudnn")], 2)
    with pytest.raises(TypeError, match="block_attention must be .* top level"):
        run_ring_attention_cases([RingCase(q, q, q, block_attention=lambda *a: a)], 2)
    with pytest.raises(ValueError, match="buffers of one shape"):
        run_ring_attention_cases([RingCase(q, q, q[..., :8])], 2)
    start = time.monotonic()
    assert run_ring_attention_cases([], 2) == []  # nothing to run: no process either
    assert time.monotonic() - start < 1


# --- which rank the error names ----------------------------------------------------------------


class FakeProcess:
    def __init__(self, exitcode=None):
        self.exitcode = exitcode


def messages(*items):
    q = queue.Queue()
    for item in items:
        q.put(item)
    return q


GLOO_CLOSED = ("RuntimeError: [third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
               "closed by peer [127.0.0.1]:4499")
GLOO_TIMEOUT = ("RuntimeError: [third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed "
                "out waiting 1000ms for send operation to complete")


def test_the_root_cause_is_named_not_the_rank_that_waited():
    procs = [FakeProcess(), FakeProcess(1), FakeProcess()]
    inbox = messages(("started", 0, "", ""), ("started", 1, "", ""), ("started", 2, "", ""),
                     ("waited", 0, GLOO_CLOSED, "tb0"), ("error", 1, "ValueError: bad", "tb1"))
    with pytest.raises(RingError, match=r"^rank 1 of 3 failed: ValueError: bad\n\(rank\(s\) "
                                        r"\[0\] failed too: rank 0: RuntimeError") as info:
        launch._collect(procs, inbox, wall_s=30, grace_s=5)
    err = info.value
    assert err.rank == 1 and err.remote_traceback == "tb1"
    assert list(err.failures) == [0, 1] and "Connection closed" in err.failures[0]
    assert err.stuck == [2] and "the other ranks [2] were stopped" in str(err)


def test_a_silent_death_is_the_root_cause_of_the_timeouts_after_it():
    procs = [FakeProcess(), FakeProcess(-9)]
    inbox = messages(("started", 0, "", ""), ("started", 1, "", ""),
                     ("waited", 0, GLOO_CLOSED, "tb0"))
    start = time.monotonic()
    with pytest.raises(RingError, match="rank 1 of 2 exited with code -9 without reporting a "
                                        "result") as info:
        launch._collect(procs, inbox, wall_s=30, grace_s=5)
    assert time.monotonic() - start < 2  # every rank accounted for: no need to wait
    assert info.value.rank == 1 and list(info.value.failures) == [0]


def test_a_stuck_rank_is_named_when_only_its_peers_report():
    procs = [FakeProcess(), FakeProcess(), FakeProcess()]
    inbox = messages(*(("started", r, "", "") for r in range(3)),
                     ("waited", 0, GLOO_TIMEOUT, "tb0"), ("waited", 2, GLOO_TIMEOUT, "tb2"))
    start = time.monotonic()
    with pytest.raises(RingError, match=r"rank 0 of 3 failed: RuntimeError.*Timed out") as info:
        launch._collect(procs, inbox, wall_s=30, grace_s=0.3)
    assert 0.3 <= time.monotonic() - start < 3  # it waited, a little, for a root cause
    assert info.value.stuck == [1] and list(info.value.failures) == [0, 2]
    assert "rank(s) [1] reported nothing: stuck, or slower than timeout_s" in str(info.value)
    assert not isinstance(info.value, launch.RingTimeout)


def test_a_rank_that_dies_while_starting_is_told_apart():
    with pytest.raises(RingError, match=r"exited with code 1 without reporting, before it "
                                        r"started the target.*__main__.*Foo") as info:
        launch._collect([FakeProcess(1)], queue.Queue(), wall_s=30, grace_s=0.1,
                        hint=lambda: "; kwargs['x'] holds __main__.Foo")
    assert info.value.rank == 0


def test_objects_of_main_are_named_in_the_hint(monkeypatch):
    Case = type("Case", (), {"__module__": "__main__"})  # as if defined in a notebook
    monkeypatch.setattr(sys.modules["__main__"], "Case", Case, raising=False)
    hint = launch._main_objects({"ok": [1, torch.zeros(2)], "case": {"c": Case()}})
    assert "kwargs['case'] holds __main__.Case" in hint and "'ok'" not in hint
    assert launch._main_objects({"ok": torch.zeros(3)}) == ""


@pytest.mark.parametrize("text,waited", [
    (GLOO_CLOSED[len("RuntimeError: "):], True),
    (GLOO_TIMEOUT[len("RuntimeError: "):], True),
    ("shapes do not match", False),
])
def test_errors_of_waiting_ranks_are_told_from_their_own(text, waited):
    assert launch._waited_for_a_peer(RuntimeError(text)) is waited
    assert launch._waited_for_a_peer(ValueError("bad block")) is False


# --- signals and clean-up ----------------------------------------------------------------------


@POSIX
def test_the_signal_guard_notes_then_hands_the_signal_on():
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        guard = launch._SignalGuard()
        with guard:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs between bytecodes
            assert guard.received == signal.SIGTERM and calls == []  # noted, not obeyed
        assert calls == []  # the previous handler is back, and has not run yet
        guard.deliver()
        assert calls == [signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert calls == [signal.SIGTERM] * 2  # restored: it gets the signals again
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_signal_guard_does_nothing_off_the_main_thread():
    seen = []

    def run():
        with launch._SignalGuard() as guard:
            seen.append(guard.previous)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [{}]  # no handler set (Python allows it only on the main thread)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _start_hanging_ring(tmp_path: Path) -> tuple[subprocess.Popen, list[int], Path]:
    """A parent process running a ring whose two ranks hang; once both are up: the parent, the
    ranks' process ids, and the folder the parent makes its temporary folders in."""
    markers, temp = tmp_path / "markers", tmp_path / "temp"
    markers.mkdir()
    temp.mkdir()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        from teachkit.ring import run_ring
        run_ring("ring_targets:mark_and_hang", 2, {{"marker_dir": {str(markers)!r}}},
                 timeout_s=120, wall_s=120)
    """)
    env = {**os.environ, "TMPDIR": str(temp)}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while len(list(markers.glob("rank*.pid"))) < 2:
        if parent.poll() is not None or time.monotonic() > deadline:
            parent.kill()
            out = parent.communicate()[0].decode(errors="replace")
            pytest.fail(f"the ranks did not start (exit {parent.returncode}):\n{out}")
        time.sleep(0.1)
    pids = [int((markers / f"rank{r}.pid").read_text()) for r in range(2)]
    assert all(_alive(pid) for pid in pids)
    assert [p.name for p in temp.iterdir()][0].startswith("teachkit-ring-")
    return parent, pids, temp


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


@POSIX
def test_sigterm_to_the_parent_stops_the_ranks_and_removes_the_folder(tmp_path):
    parent, pids, temp = _start_hanging_ring(tmp_path)
    parent.send_signal(signal.SIGTERM)
    try:
        out = parent.communicate(timeout=20)[0].decode(errors="replace")
    finally:
        parent.kill()
    assert parent.returncode == -signal.SIGTERM, out  # ended by the signal, as by default
    assert _wait_gone(pids, 5) == []
    assert list(temp.iterdir()) == []
    assert "leaked" not in out  # the queue's semaphores were released too


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG: Linux")
def test_ranks_end_with_a_parent_killed_outright(tmp_path):
    parent, pids, temp = _start_hanging_ring(tmp_path)
    parent.kill()  # SIGKILL: nothing runs in the parent any more
    parent.communicate(timeout=20)
    assert _wait_gone(pids, 5) == []  # the kernel (or each rank's watchdog) ended them
    shutil.rmtree(temp)  # the one thing a parent killed outright leaves: its folder
