"""What every tracker's sink is, and what can go wrong, sorted.

A journal's records (``journal.py``) become, in a tracker: a run (``run``), batches of metric points (``m``), and
at its ``end`` the last points, its tags, its files and its end. Each tracker's module (``mlflow_sink.py``,
``tb_sink.py``, ``wandb_sink.py``) subclasses ``Sink`` and is found by name (``sinks.py``, from the trackers of
``core/trackers.py``). A sink is also asked, in the kernel that records the run, where its records go
(``destination``: MLflow's tracking URI, the W&B project, the log folder, resolved then and not later by another
kernel) and what it adds to a run's record (``extras``: MLflow's own context tags).

What goes wrong is one of three, each handled its own way by the shipper (``lane.py``):

- ``Down``: the destination does not answer now (refused connections, timeouts, 5xx, a locked database): the records
  stay and are tried again, said once.
- ``Refused``: the destination will not take records sent as this kernel is configured (credentials, permissions, an
  address that is not a tracking server): said at once, with what to do, and not tried again until something changes.
- ``Rejected``: it refuses this one record (a value it does not store): said, and the record skipped.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

__all__ = ["Down", "Refused", "Rejected", "Ledger", "Sink"]


class Down(Exception):
    """The destination does not answer now (the records stay in the journal and are sent when it does)."""


class Refused(Exception):
    """The destination refuses records sent as this kernel is configured: ``fix`` says what to do."""

    def __init__(self, why: str, fix: str) -> None:
        super().__init__(why)
        self.why, self.fix = why, fix


class Rejected(Exception):
    """The destination refuses this one record (it is said and skipped; the rest go)."""


class Ledger:
    """One journal's records for one destination, as its sink sees them."""

    def __init__(self, address: str, settings: Mapping[str, Any], data: dict[str, Any], save: Callable[[], None],
                 made: Callable[[str, str], None], say: Callable[[str], None]) -> None:
        self.address = address      # where the records go, as messages name it
        self.settings = settings    # the destination as the recording kernel resolved it
        self.data = data            # the sink's own notes on this journal (run ids made), saved with its position
        self.save = save            # save ``data`` now, before anything else is sent (a run made is never made twice)
        self.made = made            # a record's run in the tracker (its id or address), for the run's handle
        self.say = say              # one line on the kernel's stderr


class Sink:
    """A tracker's sink: subclasses say what a run, a batch of points, a file and a run's end become."""

    name: ClassVar[str] = ""

    # -- in the kernel that records the run ----------------------------------------------------------------------
    @classmethod
    def destination(cls, options: Any) -> dict[str, Any]:
        """Where this run's records go, resolved now (the recording kernel's settings, not the shipping one's)."""
        return {}

    @classmethod
    def address(cls, settings: Mapping[str, Any]) -> str:
        """The destination as one line: the shipper keeps one queue and one retry window per address."""
        return ""

    @classmethod
    def preflight(cls, options: Any) -> None:
        """Before any rank starts: raise ``OptionsError`` for a destination the tracker will never take (so the run
        does not train for a record nobody takes)."""

    @classmethod
    def extras(cls) -> dict[str, Any]:
        """What the tracker adds to a run's record when it is recorded (tags of its own)."""
        return {}

    # -- in the kernel that sends the records ---------------------------------------------------------------------
    def credentials(self) -> str:
        """What this kernel presents to the tracker (a digest): a refused destination is tried again once it
        changes."""
        return ""

    def check(self, ledger: Ledger) -> None:
        """Before a journal's first record this round: raise ``Down`` or ``Refused`` quickly when it is so."""

    def apply(self, records: Sequence[dict[str, Any]], ledger: Ledger) -> None:
        """Send ``records``: one record, or consecutive metric records of one run (sent in one call)."""
        lead = records[0]
        try:
            if lead["k"] == "run":
                self.begin(lead, ledger)
            elif lead["k"] == "m":
                self.points(lead["key"], [p for r in records for p in r.get("pts") or []], ledger)
            elif lead["k"] == "end":
                self.end(lead, ledger)
        except (Down, Refused, Rejected):
            raise
        except Exception as exc:
            raise self.sort(exc) from exc

    def sort(self, exc: Exception) -> Exception:
        """``exc`` as ``Down``, ``Refused`` or ``Rejected`` when the tracker says which; else itself (the shipper
        tries such a record a few times, then skips it)."""
        if isinstance(exc, PermissionError):
            return Refused(f"{exc}", "give this kernel's user access to it")
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return Down(f"{type(exc).__name__}: {exc}")
        return exc

    def begin(self, rec: dict[str, Any], ledger: Ledger) -> None:
        """A run begins: its name, parameters and tags (``rec``); its parent's key, for a sweep's member."""

    def points(self, key: str, points: list[list[Any]], ledger: Ledger) -> None:
        """Metric points ``[name, value, step, ms]`` of the run ``key``, in the order reported."""

    def end(self, rec: dict[str, Any], ledger: Ledger) -> None:
        """The run's end: last points, tags, files (``files``), its status."""

    def files(self, rec: dict[str, Any], ledger: Ledger, keep: Callable[[str, str | None], None]) -> None:
        """Each of the end record's files to ``keep(path, folder)``: one that is gone is skipped; one this kernel
        may not read (or the tracker's store may not take) is said and skipped, never holding back the rest."""
        for path, folder in rec.get("files") or []:
            try:
                keep(path, folder)
            except FileNotFoundError:
                continue
            except PermissionError as exc:
                ledger.say(f"{self.name} {ledger.address}: {path} is not kept ({exc.strerror or exc}); the rest of "
                           "the run's record is")
