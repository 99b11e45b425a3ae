"""The agent's heartbeat: BEAT every HEARTBEAT_S while its rank runs, which is how the kernel tells a lost host
(silence) from a busy one."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.rank import agent


class _Child:
    """What ``_wait`` needs of a forked rank, over a real short-lived process."""

    def __init__(self, seconds: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
        self.pid = self.proc.pid

    def fileno(self) -> int:
        return -1  # no pidfd: _wait polls

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill_group(self) -> None:
        self.proc.kill()


@pytest.mark.slow  # seconds: a real agent process beats
def test_the_agent_beats_while_its_rank_runs_and_stops_when_it_ends(monkeypatch):
    monkeypatch.setattr(C, "HEARTBEAT_S", 0.4)
    ours, kernels = socket.socketpair()
    child = _Child(C.HEARTBEAT_S * 2.6)
    try:
        began = time.monotonic()
        assert agent._wait(child, ours) is False  # returns when the rank ends, not stopped
        took = time.monotonic() - began
        kernels.settimeout(0.5)
        beats = []
        while True:
            try:
                beats.append(P.recv_frame(kernels, 1 << 16))
            except (OSError, EOFError, P.ProtocolError):
                break
        assert beats == [{"t": C.BEAT}] * 2, (beats, took)  # at 0.4 s and 0.8 s of a 1.04 s rank
    finally:
        child.proc.kill()
        child.proc.wait()
        ours.close()
        kernels.close()
