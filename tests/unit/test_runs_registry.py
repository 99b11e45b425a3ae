"""The runs registry on disk (``jupyter_torchdist/panel/``): its folder is owner-only and refuses what is not the
user's, files are replaced whole, a dead kernel's runs show as lost, old files go, requests reach the kernel's inbox
once, and the list a reader makes of it."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_torchdist.core import held_folder as F
from jupyter_torchdist.panel.asks import Inbox, ask, wait_taken
from jupyter_torchdist.panel.listing import as_json, etag_of, find, list_runs
from jupyter_torchdist.panel.registry import (FORMAT, KEEP_S, STALE_S, VERSION, asks_dir, clean, kernel_file,
                                              kernel_state, read_records, reports_dir)


def _record(kernel_id: str, *, pid: int | None = None, updated: float | None = None, ended: float | None = None,
            states: tuple[str, ...] = ("running",), notebook: str | None = "a.ipynb") -> dict:
    now = time.time()
    entries = [{"kind": "run", "id": f"{kernel_id[:8]}-{i + 1}", "number": i + 1, "kernel_id": kernel_id,
                "notebook": notebook, "state": s, "submitted": now - 10 + i, "ended": None, "step": 3, "total": 10}
               for i, s in enumerate(states)]
    return {"format": FORMAT, "version": VERSION, "kernel_id": kernel_id, "pid": os.getpid() if pid is None else pid,
            "host": socket.gethostname(), "notebook": notebook, "started": now - 20,
            "updated": now if updated is None else updated, "ended": ended, "entries": entries}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def reg(tmp_path: Path) -> Path:
    folder = F.registry_dir(tmp_path / "runtime", create=True)
    assert folder is not None
    return folder


# -- the folder -------------------------------------------------------------------------------------------------
def test_the_folder_is_made_owner_only_and_files_are_owner_only(tmp_path: Path) -> None:
    assert F.registry_dir(tmp_path / "runtime") is None, "reading never makes the folder"
    folder = F.registry_dir(tmp_path / "runtime", create=True)
    assert folder == tmp_path / "runtime" / F.FOLDER_NAME
    assert os.stat(folder).st_mode & 0o777 == 0o700
    F.write_json(folder / "x.json", {"a": 1})
    assert os.stat(folder / "x.json").st_mode & 0o777 == 0o600
    os.chmod(folder, 0o755)   # loosened by someone: made owner-only again on the next use
    F.registry_dir(tmp_path / "runtime")
    assert os.stat(folder).st_mode & 0o777 == 0o700


def test_a_link_in_place_of_the_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / F.FOLDER_NAME).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(F.RegistryError, match="not a folder"):
        F.registry_dir(runtime)


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user (CI runs as root)")
def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other" / F.FOLDER_NAME
    other.mkdir(parents=True, mode=0o700)
    os.chown(other, 4242, 4242)
    with pytest.raises(F.RegistryError, match="belongs to another user"):
        F.registry_dir(other.parent)


def test_files_are_replaced_whole_and_never_read_through_a_link(reg: Path) -> None:
    path = reg / "k.json"
    F.write_json(path, {"loss": float("nan"), "best": float("inf"), "ok": 1.5})
    assert json.loads(path.read_text()) == {"loss": "nan", "best": "inf", "ok": 1.5}, "JSON has no NaN"
    assert [p.name for p in reg.iterdir()] == ["k.json"], "no temporary file left behind"
    secret = reg.parent / "secret.json"
    secret.write_text('{"x": 1}')
    (reg / "link.json").symlink_to(secret)
    assert F.read_json(reg / "link.json") is None
    (reg / "torn.json").write_text('{"x": ')
    assert F.read_json(reg / "torn.json") is None


# -- the kernels' files -----------------------------------------------------------------------------------------
def test_a_kernel_is_live_ended_or_gone(reg: Path) -> None:
    now = time.time()
    assert kernel_state(_record("aaaa1111"), now) == "live"
    assert kernel_state(_record("aaaa1111", ended=now - 1), now) == "ended"
    assert kernel_state(_record("aaaa1111", pid=_dead_pid()), now) == "gone", "its pid is gone"
    assert kernel_state(_record("aaaa1111", updated=now - STALE_S - 1), now) == "gone", "silent too long"


def test_records_of_another_format_or_torn_are_skipped(reg: Path) -> None:
    F.write_json(kernel_file(reg, "good"), _record("good"))
    F.write_json(kernel_file(reg, "old"), {**_record("old"), "version": VERSION + 1})
    (reg / "kernel-torn.json").write_text('{"format": ')
    F.write_json(reg / "notes.json", _record("notes"))
    assert [r["kernel_id"] for r in read_records(reg)] == ["good"]


def test_a_dead_kernels_runs_are_lost_and_listed_only_with_all(reg: Path) -> None:
    F.write_json(kernel_file(reg, "live0001"), _record("live0001", states=("running", "done")))
    F.write_json(kernel_file(reg, "dead0001"), _record("dead0001", pid=_dead_pid(), states=("running", "stopped")))
    F.write_json(kernel_file(reg, "ended001"), _record("ended001", ended=time.time(), states=("running",)))
    listed = list_runs(reg)
    assert {(e["id"], e["state"], e["kernel"]) for e in listed} == {("live0001-1", "running", "live"),
                                                                   ("live0001-2", "done", "live")}
    everything = {e["id"]: e for e in list_runs(reg, everything=True)}
    assert everything["dead0001-1"]["state"] == "lost" and "is gone" in everything["dead0001-1"]["outcome"]
    assert everything["dead0001-2"]["state"] == "stopped", "an ended run stays as it ended"
    assert everything["ended001-1"]["state"] == "lost" and "ended while it ran" in everything["ended001-1"]["outcome"]
    assert [e["submitted"] for e in listed] == sorted((e["submitted"] for e in listed), reverse=True)


def test_the_server_knows_a_renamed_notebooks_path_and_the_etag_follows_the_list(reg: Path) -> None:
    F.write_json(kernel_file(reg, "k1"), _record("k1"))
    first = as_json(list_runs(reg))
    renamed = list_runs(reg, notebooks={"k1": "renamed.ipynb"})
    assert renamed[0]["notebook"] == "renamed.ipynb"
    assert etag_of(first) == etag_of(as_json(list_runs(reg))), "an unchanged list has the same tag"
    assert etag_of(first) != etag_of(as_json(renamed))
    found = find(reg, "k1-1")
    assert found is not None and found.kernel == "live" and found.record["kernel_id"] == "k1"
    assert find(reg, "k1-9") is None and find(None, "k1-1") is None


def test_old_files_of_ended_or_dead_kernels_are_removed(reg: Path) -> None:
    now = time.time()
    for kernel_id, record in [("old", _record("old", ended=now - KEEP_S - 5)),
                              ("recent", _record("recent", ended=now - 60)),
                              ("live", _record("live"))]:
        F.write_json(kernel_file(reg, kernel_id), record)
        asks_dir(reg, kernel_id).mkdir()
        reports_dir(reg, kernel_id).mkdir()
    assert clean(reg, now) == 1
    assert sorted(p.name for p in reg.iterdir()) == sorted(
        f"kernel-{k}{s}" for k in ("recent", "live") for s in (".json", ".asks", ".reports"))


def test_a_kernel_id_that_is_not_a_file_name_is_refused(reg: Path) -> None:
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(ValueError):
            kernel_file(reg, bad)


# -- requests to a kernel ---------------------------------------------------------------------------------------
def test_a_request_is_taken_once_in_order_and_the_asker_sees_it_taken(reg: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ask(reg, "k1", "stop", "1", by="test")   # no such kernel: nothing to ask
    inbox = Inbox(reg, "k1")
    assert os.stat(inbox.path).st_mode & 0o777 == 0o700
    assert inbox.take() == []
    first = ask(reg, "k1", "stop", "3", by="the runs panel")
    time.sleep(0.01)
    ask(reg, "k1", "report", "s2", by="the runs panel")
    taken = inbox.take()
    assert [(t["kind"], t["target"], t["by"]) for t in taken] == [("stop", "3", "the runs panel"),
                                                                   ("report", "s2", "the runs panel")]
    assert wait_taken(first, 0.1) and inbox.take() == []
    with pytest.raises(ValueError):
        ask(reg, "k1", "rm -rf", "3", by="x")


def test_a_request_left_in_the_same_clock_tick_as_the_last_look_is_still_taken(reg: Path) -> None:
    """A folder's clock can be coarser than the kernel's looks: a folder changed lately is read again."""
    inbox = Inbox(reg, "k1")
    assert inbox.take() == []
    seen = os.stat(inbox.path).st_mtime_ns
    ask(reg, "k1", "stop", "1", by="x")
    os.utime(inbox.path, ns=(seen, seen))   # as if the folder's time had not moved
    assert [t["target"] for t in inbox.take()] == ["1"]


def test_a_restarted_kernel_takes_no_request_left_for_its_previous_process(reg: Path) -> None:
    """A kernel restarted by its server keeps its id and numbers its runs from 1 again."""
    Inbox(reg, "k1")
    ask(reg, "k1", "stop", "1", by="x")
    assert Inbox(reg, "k1").take() == []


def test_closing_the_inbox_drops_what_was_left(reg: Path) -> None:
    inbox = Inbox(reg, "k1")
    path = ask(reg, "k1", "stop", "1", by="x")
    inbox.close()
    assert not path.exists() and not inbox.path.exists()
    with pytest.raises(FileNotFoundError):
        ask(reg, "k1", "stop", "1", by="x")


# -- what another user, or a malformed file, can do ----------------------------------------------------------------
NOBODY = 65534


@pytest.mark.skipif(os.getuid() != 0, reason="acting as another local user needs root (CI runs as root)")
def test_a_folder_swapped_by_another_user_after_the_kernel_checked_it_is_never_obeyed(tmp_path: Path) -> None:
    """A runtime directory others may write to (a shared /tmp, a misconfigured server): another user renames the
    kernel's registry folder away, puts a link to a folder of theirs in its place, and leaves a stop request for the
    kernel's run there. The kernel reads and writes only the folder it checked (it holds it open); the server and the
    command line, which open it by name, refuse the link."""
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="jtd-shared-", dir="/tmp"))
    try:
        os.chmod(shared, 0o777)   # anyone may rename what is in it: the mistake the kernel must survive
        folder = F.registry_dir(shared, create=True)
        assert folder is not None
        inbox = Inbox(folder, "k1")
        with F.Held(folder) as mine:
            held = mine
        attack = textwrap.dedent(f"""
            import json, os
            shared = {str(shared)!r}
            os.rename(os.path.join(shared, {F.FOLDER_NAME!r}), os.path.join(shared, "renamed"))
            evil = os.path.join(shared, "evil")
            os.makedirs(os.path.join(evil, "kernel-k1.asks"))
            with open(os.path.join(evil, "kernel-k1.asks", "stop-abc123.json"), "w") as f:
                json.dump({{"kind": "stop", "target": "abc123", "by": "mallory", "at": 1.0}}, f)
            os.symlink(evil, os.path.join(shared, {F.FOLDER_NAME!r}))
        """)
        done = subprocess.run(["/usr/bin/python3", "-c", attack], user=NOBODY, group=NOBODY,  # the stdlib alone
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert F._AT, "every file is opened relative to the folder the kernel holds"
        assert inbox.take() == [], "the request in the other user's folder never reaches the kernel"
        assert held.fd is None
        with pytest.raises(F.RegistryError, match="not a folder"):
            F.registry_dir(shared)   # the server, the command line
        ask(shared / "renamed", "k1", "stop", "mine1", by="the owner")   # the kernel's own folder still works
        assert [a["target"] for a in inbox.take()] == ["mine1"]
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


def test_a_malformed_file_costs_only_itself_and_never_the_extensions_load(reg: Path) -> None:
    good = _record("k-good")
    F.write_json(kernel_file(reg, "k-good"), good)
    (reg / "kernel-deep.json").write_text("[" * 200_000 + "]" * 200_000)
    F.write_json(kernel_file(reg, "k-pid"), {**_record("k-pid"), "pid": 10**30})
    F.write_json(kernel_file(reg, "k-time"), {**_record("k-time"), "updated": "abc"})
    odd = _record("k-odd")
    odd["entries"][0].update(submitted="abc", ended=[1], step="x", hosts="h", number=True)
    F.write_json(kernel_file(reg, "k-odd"), odd)
    F.write_json(kernel_file(reg, "k-named"), {**_record("k-named"), "kernel_id": "k-other"})   # not its file's
    assert [r["kernel_id"] for r in read_records(reg)] == ["k-good", "k-odd"]
    entry = next(e for e in list_runs(reg) if e["kernel_id"] == "k-odd")
    assert (entry["submitted"], "ended" in entry, "step" in entry, "hosts" in entry, entry["number"]) == (
        0.0, False, False, False, 0)
    assert find(reg, good["entries"][0]["id"]) is not None and clean(reg) == 0
    from types import SimpleNamespace

    from jupyter_torchdist.panel import publisher

    shell = SimpleNamespace(events=SimpleNamespace(register=lambda *a: None, unregister=lambda *a: None))
    os.environ["JUPYTER_RUNTIME_DIR"] = str(reg.parent)
    try:
        started = publisher.start(shell)
        assert started is not None, "loading the extension reads the folder and goes on"
    finally:
        publisher.stop(shell)
        del os.environ["JUPYTER_RUNTIME_DIR"]


def test_an_ended_detached_runs_row_stays_an_hour_and_absolute_notebook_paths_read_from_the_servers_root(reg: Path):
    from jupyter_torchdist.panel.listing import DETACHED_SHOWN_S, list_runs

    now = time.time()
    F.write_json(kernel_file(reg, "detached-0123456789ab"), _record(
        "detached-0123456789ab", ended=now - 60, states=("done",), notebook="/srv/lab/project/train.ipynb"))
    F.write_json(kernel_file(reg, "detached-ba9876543210"), _record(
        "detached-ba9876543210", ended=now - DETACHED_SHOWN_S - 1, states=("done",)))
    F.write_json(kernel_file(reg, "plainkernel"), _record("plainkernel", ended=now - 60, states=("done",)))
    shown = list_runs(reg, now=now, root="/srv/lab")
    assert [(e["kernel_id"], e["state"], e["notebook"]) for e in shown] == [
        ("detached-0123456789ab", "done", "project/train.ipynb")], "an ended kernel's runs go; a detached run's stay"
    assert list_runs(reg, now=now, root="/elsewhere")[0]["notebook"] == "/srv/lab/project/train.ipynb"
    assert len(list_runs(reg, everything=True, now=now)) == 3
