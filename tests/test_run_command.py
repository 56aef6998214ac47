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
