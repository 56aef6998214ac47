"""run_command: a command in a fresh process, with a bar of the seconds it runs."""

from __future__ import annotations

import sys
import time

import pytest

from teachkit.progress import run_command


def test_returns_stdout_and_draws_a_bar_that_leaves_nothing_behind(capsys):
    out = run_command([sys.executable, "-c", "import time; time.sleep(1.2); print('done')"])
    assert out == "done\n"
    err = capsys.readouterr().err
    assert "python -c import time" in err and "00:0" in err  # the label and the seconds
    run_command([sys.executable, "-c", "print(1)"], enabled=False)
    assert capsys.readouterr().err == ""


def test_a_failure_raises_with_the_commands_stderr():
    with pytest.raises(RuntimeError, match=r"status 3:\n.*the reason"):
        run_command([sys.executable, "-c",
                     "import sys; print('the reason', file=sys.stderr); sys.exit(3)"],
                    desc="failing", enabled=False)


def test_a_timeout_stops_the_command():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="still ran after 1 s"):
        run_command([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1,
                    enabled=False)
    assert time.monotonic() - start < 10  # killed, not waited for


def test_a_timeout_sends_sigterm_first_so_the_command_can_stop_its_own_processes(tmp_path):
    flag = tmp_path / "stopped"
    script = ("import signal, sys, time\n"
              "def stop(*_):\n"
              f"    open({str(flag)!r}, 'w').write('cleaned up')\n"
              "    sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, stop)\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    with pytest.raises(TimeoutError):
        run_command([sys.executable, "-c", script], timeout=2, enabled=False)
    assert flag.read_text() == "cleaned up"


def test_stop_process_kills_a_command_that_ignores_sigterm():
    import subprocess

    from teachkit.progress import stop_process

    proc = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                             "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('on', "
                             "flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "on\n"  # the handler is in place
    start = time.monotonic()
    stop_process(proc, grace=0.5)
    assert proc.returncode == -9 and time.monotonic() - start < 10
