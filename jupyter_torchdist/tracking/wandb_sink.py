"""Weights & Biases' sink: a run's records become one W&B run, written by the kernel (never by the ranks), through
W&B's own client.

**Where.** The project is ``--experiment``, else ``WANDB_PROJECT``, else the notebook's name; the entity
``WANDB_ENTITY`` (else W&B's default for the key); the mode ``WANDB_MODE`` (``offline`` keeps runs on disk for
``wandb sync``); the folder ``WANDB_DIR`` (else the notebook's folder): read when the run is recorded, in the kernel
that records it. The key and the server are W&B's own settings (``WANDB_API_KEY`` or ``wandb login``,
``WANDB_BASE_URL``).

**One run per run.** The W&B run's id is made from the record's key, and a retry (or the next kernel, for a journal
an ended kernel left) resumes that run (``resume="allow"``) rather than start another. A sweep's parent and members
share one W&B group (the parent's job type ``sweep``, the members' ``member``); the parent's summary names the best
member and its metric. The saved report, the code that ran and the value's text are an artifact of the run
(``run-report``); profile traces go under its ``profile/``.

W&B's own console capture and system metrics are off for these runs: the kernel's console and machine are not the
run's ranks'.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from typing import Any

from .names import experiment_name, notebook_path
from .sink import Down, Ledger, Refused, Rejected, Sink

__all__ = ["WandbSink", "wandb_id"]

_EXIT = {"FINISHED": 0, "KILLED": 0, "FAILED": 1}
_LOGIN = ("set WANDB_API_KEY in the kernel's environment (or run `wandb login` in a terminal), or WANDB_MODE=offline "
          "to keep the runs on disk for `wandb sync`")


def wandb_id(key: str) -> str:
    """The W&B run id of a record's key: the same on every try, in every kernel."""
    return re.sub(r"[^a-z0-9]", "", key.lower())[:64]


class WandbSink(Sink):
    name = "wandb"

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], Any] = {}

    @classmethod
    def destination(cls, options: Any) -> dict[str, Any]:
        given = getattr(options, "experiment", None)
        project = given or os.environ.get("WANDB_PROJECT") or experiment_name(None)
        folder = os.environ.get("WANDB_DIR") or os.getcwd()
        return {"project": project, "entity": os.environ.get("WANDB_ENTITY") or None,
                "mode": os.environ.get("WANDB_MODE") or None, "dir": os.path.abspath(os.path.expanduser(folder))}

    @classmethod
    def address(cls, settings: Mapping[str, Any]) -> str:
        where = "/".join(str(p) for p in (settings.get("entity"), settings.get("project")) if p)
        mode = settings.get("mode")
        return f"{where} ({mode})" if mode in ("offline", "dryrun", "disabled") else where

    def credentials(self) -> str:
        netrc = os.path.expanduser("~/.netrc")
        seen = [os.environ.get(k, "") for k in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_ENTITY")]
        seen.append(str(os.path.getmtime(netrc)) if os.path.exists(netrc) else "")
        return hashlib.sha256("\0".join(seen).encode()).hexdigest()

    def sort(self, exc: Exception) -> Exception:
        import wandb.errors as errors

        text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        if isinstance(exc, errors.AuthenticationError) or (isinstance(exc, errors.UsageError)
                                                           and re.search(r"api.?key|log ?in", text, re.I)):
            return Refused(f"refuses this kernel's credentials ({text})", _LOGIN)
        if isinstance(exc, errors.CommError):
            return Down(f"does not answer ({text})")
        if isinstance(exc, errors.UsageError):
            return Refused(f"refuses the run ({text})", "check WANDB_PROJECT, WANDB_ENTITY and WANDB_MODE")
        if isinstance(exc, errors.Error):
            return Rejected(text)
        return super().sort(exc)

    def begin(self, rec: dict[str, Any], ledger: Ledger) -> None:
        key = rec["key"]
        if (ledger.address, key) in self._runs:
            return
        import wandb

        s = ledger.settings
        tags = rec.get("tags") or {}
        groups: dict[str, str] = ledger.data.setdefault("groups", {})
        sweep = tags.get("jtd.kind") == "sweep"
        if sweep:
            groups[key] = f"{str(rec.get('name') or 'sweep')[:90]} [{wandb_id(key)}]"
        group = groups.get(key) if sweep else groups.get(rec.get("parent") or "")
        kind = "sweep" if sweep else ("member" if rec.get("parent") else "run")
        os.makedirs(str(s.get("dir") or os.getcwd()), exist_ok=True)
        settings = wandb.Settings(console="off", silent=True, save_code=False, x_disable_stats=True)
        if path := notebook_path():
            settings.program = path
        run = wandb.init(project=s.get("project"), entity=s.get("entity"), mode=s.get("mode"), dir=s.get("dir"),
                         id=wandb_id(key), resume="allow", name=str(rec.get("name") or key)[:128], group=group,
                         job_type=kind, config={**(rec.get("params") or {}), **{k: v for k, v in tags.items()}},
                         reinit="create_new", settings=settings)
        self._runs[(ledger.address, key)] = run
        ledger.made(key, str(run.url or run.settings.sync_dir))

    def points(self, key: str, points: list[list[Any]], ledger: Ledger) -> None:
        run = self._runs.get((ledger.address, key))
        if run is None or not points:
            return
        step: int | None = None
        values: dict[str, float] = {}
        for name, value, at, _ in points:
            if step is not None and int(at) != step:
                run.log(values, step=step)
                values = {}
            step = int(at)
            values[str(name)] = float(value)
        run.log(values, step=step)

    def end(self, rec: dict[str, Any], ledger: Ledger) -> None:
        run = self._runs.get((ledger.address, rec["key"]))
        if run is None:
            return
        import wandb

        self.points(rec["key"], rec.get("pts") or [], ledger)
        summary = {str(k): v for k, v in (rec.get("tags") or {}).items()}
        if rec.get("best"):
            summary["jtd.best_run_id"] = wandb_id(str(rec["best"]))   # the parent names its best member
        run.summary.update(summary)
        files: list[tuple[str, str]] = []

        def keep(path: str, folder: str | None) -> None:
            if not os.path.exists(path):
                raise FileNotFoundError(path)
            if not os.access(path, os.R_OK):
                raise PermissionError(13, "Permission denied", path)
            files.append((path, f"{folder}/{os.path.basename(path)}" if folder else os.path.basename(path)))

        self.files(rec, ledger, keep)
        if files:
            artifact = wandb.Artifact(f"{wandb_id(rec['key'])}-report", type="run-report")
            for path, name in files:
                artifact.add_file(path, name=name)
            run.log_artifact(artifact)
        run.finish(exit_code=_EXIT.get(str(rec.get("status")), 0))
        self._runs.pop((ledger.address, rec["key"]), None)
