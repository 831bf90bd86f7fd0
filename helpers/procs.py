"""Running the NVIDIA tools (nsys, ncu) as child processes with a time limit that holds.

``subprocess.run(..., timeout=)`` kills only the process it started: a tool that is a wrapper
script (nsys is one) leaves its own children running, they keep the output pipes open, and the
wait for the pipes' end then lasts as long as they do. Here the tool runs in a process group of
its own, and on a timeout (or an interrupt) the whole group is killed before anything else.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence


def run_bounded(command: Sequence[str], timeout_s: float, *, stdout: int | None = subprocess.PIPE,
                env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` (text output, stderr captured) for at most ``timeout_s`` seconds.

    Raises :class:`subprocess.TimeoutExpired` once the command and every process it started are gone;
    :class:`OSError` when it cannot be started.
    """
    proc = subprocess.Popen(list(command), stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=hasattr(os, "killpg"))
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:  # a timeout or Ctrl-C: nothing of the tool may outlive the call
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)  # the group the tool leads: its children too
        else:  # pragma: no cover - Windows has no process groups to kill
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)  # the pipes close once the group is gone
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass
