"""A lane: one destination's records (a tracker and where it records: an MLflow server, a log folder, a W&B
project), sent in order by a thread of its own, with its own retry window, so a destination that does not answer
never delays another's records, in this kernel or the next one.

What goes wrong is sorted (``sink.py``): a destination that does not answer is said once and tried again, every few
seconds at first and then less often; once it has not answered for ``LATE_S`` that is said once more, with how to
send or drop what waits (``jupyter-torchdist tracking``). One that refuses this kernel's credentials or is no tracking
server is said at once with what to do, and not tried again until its credentials change, a new run records to it,
or the command line asks. A record it refuses is said and skipped; one that fails otherwise is tried a few times,
then skipped and said.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any, Final, Protocol

from .journal import read_records
from .outbox import clear_status, read_order, write_status
from .sink import Down, Ledger, Refused, Rejected

__all__ = ["Lane", "groups", "LATE_S", "GROUP_MAX"]

GROUP_MAX: Final = 200        # metric records sent in one call
LATE_S: Final = 600.0         # a destination silent this long is said again, with what to do
LATE_DELAY_S: Final = 300.0   # and tried this often from then on
RECORD_TRIES: Final = 5       # a record that fails for reasons the tracker does not name: tried this often
DOWN_TRIES: Final = 20        # one that fails as "down" while the destination answers its check: this often


def groups(records: Iterator[tuple[dict[str, Any], int]]) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """Consecutive metric records of one run together (one call), every other record alone."""
    group: list[dict[str, Any]] = []
    end = 0
    for rec, after in records:
        if group and (rec.get("k") != "m" or rec.get("key") != group[0].get("key") or len(group) >= GROUP_MAX):
            yield group, end
            group = []
        group.append(rec)
        end = after
        if rec.get("k") != "m":
            yield group, end
            group = []
    if group:
        yield group, end


class Shipper(Protocol):
    """What a lane asks of its shipper (``shipper.py``)."""

    spool: str
    sinks: dict[str, Any]
    stopped: bool

    def delays(self) -> tuple[float, float, float]: ...   # every so often; first retry; at most
    def path(self, jid: str) -> str: ...
    def state(self, jid: str) -> Any: ...
    def is_own(self, jid: str) -> bool: ...
    def made(self, tracker: str, key: str, ref: str) -> None: ...
    def say(self, text: str) -> None: ...
    def finished(self, jid: str) -> None: ...
    def ready(self, tracker: str) -> None: ...   # the tracker's package imported (one thread at a time)


class Lane:
    def __init__(self, shipper: Shipper, tracker: str, where: str) -> None:
        self.shipper, self.tracker, self.address = shipper, tracker, where
        self.label = f"{tracker} {where}".strip()
        self.jids: list[str] = []
        self.lock = threading.Lock()     # one step at a time (the lane's thread, or a caller's round)
        self._wake = threading.Event()
        self.retry_at = 0.0
        self.delay = 0.0
        self.down_since: float | None = None
        self.late_said = False
        self.refused: Refused | None = None
        self._refused_with = ""
        self._fails: dict[tuple[str, int], int] = {}
        self._order_seen = 0.0
        self.thread: threading.Thread | None = None

    @property
    def sink(self) -> Any:
        return self.shipper.sinks[self.tracker]

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name=f"jupyter-torchdist-tracking {self.label}"[:60],
                                       daemon=True)
        self.thread.start()

    def offer(self, jid: str) -> None:
        """A journal with records for this destination; a new run recording to a refused one tries it again."""
        if jid in self.jids:
            return
        self.jids = sorted([*self.jids, jid])
        if self.refused is not None and self.shipper.is_own(jid):
            self.refused = None
            self.retry_at = 0.0
        self.wake()

    def forget(self, jid: str) -> None:
        if jid in self.jids:
            self.jids = [j for j in self.jids if j != jid]

    def wake(self) -> None:
        self._wake.set()

    @property
    def stuck(self) -> bool:
        """Refused, and nothing changed since: nothing is sent until something does."""
        return self.refused is not None and self.sink.credentials() == self._refused_with

    def _loop(self) -> None:
        while not self.shipper.stopped:
            due = self.retry_at - time.monotonic()   # a retry due sooner than the next period: then
            self._wake.wait(min(self.shipper.delays()[0], due) if due > 0 else self.shipper.delays()[0])
            self._wake.clear()
            if self.shipper.stopped:
                return
            try:
                self.step()
            except Exception as exc:  # the lane never dies: the records wait on disk
                self.shipper.say(f"jupyter-torchdist: tracking ({self.label}): {type(exc).__name__}: {exc}")

    def step(self) -> None:
        """Send what this destination has not had yet, journal by journal, oldest first."""
        with self.lock:
            self._orders()
            if self.refused is not None:
                if self.sink.credentials() == self._refused_with:
                    return
                self.refused, self.retry_at = None, 0.0   # its credentials changed: try them
            if time.monotonic() < self.retry_at:
                return
            try:
                if self.jids:
                    self.shipper.ready(self.tracker)
                for jid in list(self.jids):
                    if self._ship(jid):
                        self.forget(jid)
                        self.shipper.finished(jid)
            except Down as exc:
                self._outage(str(exc))
                return
            except Refused as exc:
                self._refuse(exc)
                return
            self._answered()

    def _ship(self, jid: str) -> bool:
        """Send what this destination has not had of ``jid``; True once it has the whole closed journal."""
        st = self.shipper.state(jid)
        if st is None or st.closed(self.tracker):
            return True
        ledger = Ledger(self.address, st.settings(self.tracker), st.notes(self.tracker), st.save,
                        lambda key, ref: self.shipper.made(self.tracker, key, ref), self.shipper.say)
        checked = False
        position = st.pos(self.tracker)
        for group, after in groups(read_records(self.shipper.path(jid), position)):
            kind = group[0].get("k")
            if kind not in ("head", "close"):
                if not checked:
                    self.sink.check(ledger)
                    checked = True
                self._apply(group, ledger, (jid, position))
            st.advance(self.tracker, after, kind == "close")
            position = after
        return st.closed(self.tracker)

    def _apply(self, group: list[dict[str, Any]], ledger: Ledger, where: tuple[str, int]) -> None:
        lead = group[0]
        what = f"{lead.get('k')} record of {lead.get('key')}"
        try:
            self.sink.apply(group, ledger)
        except Refused:
            raise
        except Rejected as exc:
            self.shipper.say(f"jupyter-torchdist: {self.label} refused a {what} ({exc}); it is skipped, the rest go")
            return
        except Down as exc:
            if self._failed(where) < DOWN_TRIES:
                raise
            self.shipper.say(f"jupyter-torchdist: {self.label} answers but failed a {what} {DOWN_TRIES} times "
                             f"({exc}); it is skipped, the rest go")
        except Exception as exc:
            if self._failed(where) < RECORD_TRIES:
                raise Down(f"failed a {what} ({type(exc).__name__}: {str(exc)[:200]}); tried again") from None
            self.shipper.say(f"jupyter-torchdist: {self.label} failed a {what} {RECORD_TRIES} times "
                             f"({type(exc).__name__}: {str(exc)[:300]}); it is skipped, the rest go")
        self._fails.pop(where, None)

    def _failed(self, where: tuple[str, int]) -> int:
        self._fails[where] = self._fails.get(where, 0) + 1
        return self._fails[where]

    # -- what is said, and when it is tried again ------------------------------------------------------------------
    def _outage(self, why: str) -> None:
        _, first, most = self.shipper.delays()
        now = time.monotonic()
        if self.down_since is not None and now - self.down_since >= LATE_S:
            most = max(most, LATE_DELAY_S)
        self.delay = min(most, max(first, self.delay * 2))
        self.retry_at = now + self.delay
        spool = self.shipper.spool
        if self.down_since is None:
            self.down_since = now
            self.shipper.say(f"jupyter-torchdist warning: {self.label}: {why}. Runs go on; their records are kept in "
                             f"{spool} and sent when it answers again.")
            self._status("down", why)
        elif not self.late_said and now - self.down_since >= LATE_S:
            self.late_said = True
            self.shipper.say(f"jupyter-torchdist warning: {self.label} has not answered for {LATE_S / 60:.0f} min: "
                             f"records of {len(self.jids)} run(s) wait in {spool}, tried again every "
                             f"{LATE_DELAY_S / 60:.0f} min. `jupyter-torchdist tracking resend` sends them now, "
                             f"`jupyter-torchdist tracking drop {self.tracker} {self.address}` gives them up.")
            self._status("down", why)

    def _refuse(self, exc: Refused) -> None:
        self.refused, self._refused_with = exc, self.sink.credentials()
        self.shipper.say(f"jupyter-torchdist: {self.label} {exc.why}: {exc.fix}. Its records are kept in "
                         f"{self.shipper.spool} and sent once that is done (when its credentials change, a run "
                         "records to it, or `jupyter-torchdist tracking resend`).")
        self._status("refused", exc.why, exc.fix)

    def _answered(self) -> None:
        self.delay, self.retry_at = 0.0, 0.0
        self.late_said = False
        if self.down_since is not None:
            self.down_since = None
            self.shipper.say(f"jupyter-torchdist: {self.label} answers again: the records kept meanwhile are sent.")
        clear_status(self.shipper.spool, self.tracker, self.address)

    def _status(self, state: str, why: str, fix: str = "") -> None:
        try:
            write_status(self.shipper.spool, self.tracker, self.address, state, why, fix)
        except OSError:
            pass   # said on stderr already; the doctor just knows less

    def _orders(self) -> None:
        """The command line's word for this destination: send now, or drop the journals it names."""
        order = read_order(self.shipper.spool, self.tracker, self.address)
        if order is None or float(order.get("at", 0)) <= self._order_seen:
            return
        self._order_seen = float(order.get("at", 0))
        if order.get("do") == "resend":
            self.refused, self.retry_at, self.delay, self.late_said = None, 0.0, 0.0, False
        elif order.get("do") == "drop":
            dropped = [jid for jid in order.get("jids") or [] if jid in self.jids]
            for jid in dropped:
                st = self.shipper.state(jid)
                if st is not None:
                    st.advance(self.tracker, os.path.getsize(self.shipper.path(jid)), True)
                self.forget(jid)
                self.shipper.finished(jid)
            if dropped:
                self.shipper.say(f"jupyter-torchdist: the records of {len(dropped)} run(s) for {self.label} are "
                                 "dropped, as asked")
