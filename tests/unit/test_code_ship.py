"""The notebook's code on every rank: which files travel (``core/code_folder.py``), what the kernel names and sends
(``kernel/code_ship.py``), what a host that cannot see the folder does with it (``rank/code_setup.py``, run in a fresh
Python here, as a rank would), and the channel's files connection. The cluster test (tests/cluster/test_your_code.py)
walks the same path on workers that cannot see the notebook's folder."""
from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
import textwrap
import time
import zipfile
import io

import pytest

from jupyter_torchdist.channel.server import ChannelServer
from jupyter_torchdist.core.code_folder import list_files, stat_key
from jupyter_torchdist.core.contract.code import CodeShip, NeededImport
from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.core.options import OptionsError, RunOptions, parse_options
from jupyter_torchdist.kernel import code_ship
from jupyter_torchdist.rank import code_setup
from jupyter_torchdist.rank.packages import CodeSetupError, check_needs

from .. import support


def _rels(folder, entries=()):
    return [e.rel for e in list_files(str(folder), entries)]


def test_what_travels_leaves_out_caches_environments_and_what_gitignore_names(tmp_path):
    for rel in ["mymodel.py", "helpers/__init__.py", "data/keep.csv", "data/big.bin", "logs/run.log", "x.log",
                "sub/x.log", "important.log", ".git/HEAD", ".ipynb_checkpoints/a.ipynb", "pkg/__pycache__/m.pyc",
                ".mypy_cache/c.db", "venv/pyvenv.cfg", "venv/lib/site.py", "build/out.o", "src/build/keep.py"]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    (tmp_path / ".gitignore").write_text("# caches\n*.log\n!important.log\nlogs/\n/build\ndata/**/*.bin\n")
    assert _rels(tmp_path) == [".gitignore", "data/keep.csv", "helpers/__init__.py", "important.log", "mymodel.py",
                               "src/build/keep.py"]
    assert _rels(tmp_path, ("helpers", "mymodel")) == ["helpers/__init__.py", "mymodel.py"]


def test_the_listing_key_changes_with_an_edit_of_the_same_size(tmp_path):
    (tmp_path / "m.py").write_text("VALUE = 1\n")
    before = stat_key(list_files(str(tmp_path)))
    (tmp_path / "m.py").write_text("VALUE = 2\n")
    assert stat_key(list_files(str(tmp_path))) != before


@pytest.fixture
def notebook(tmp_path, monkeypatch):
    """A notebook folder (the kernel's current one) and a second sys.path entry of the user's (``../src``)."""
    folder, src = tmp_path / "notebook", tmp_path / "src"
    (folder / "helpers").mkdir(parents=True)
    (folder / "mymodel.py").write_text("import othermod\nVALUE = 1\n")
    (folder / "helpers" / "__init__.py").write_text("NAME = 'helpers'\n")
    (folder / "data.txt").write_text("beside the notebook\n")
    (src / "otherpkg").mkdir(parents=True)
    (src / "othermod.py").write_text("import deeper, json, numpy\n")
    (src / "deeper.py").write_text("DEEP = 3\n")
    (src / "otherpkg" / "__init__.py").write_text("")
    (src / "unused.py").write_text("")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(src))
    return folder, src


def test_the_working_directory_and_the_modules_the_run_imports_from_other_entries_travel(notebook):
    folder, src = notebook
    code = code_ship.ship_code({"mymodel", "torch.nn", "__main__"}, RunOptions(), travels=True)
    assert code.workdir is not None and code.workdir.root == str(folder.resolve())
    assert code.workdir.files == 3 and code.workdir.size > 0
    [modules] = code.modules
    assert modules.root == str(src.resolve()) and modules.entries == ("deeper", "othermod")  # through mymodel's imports
    assert {n.name for n in code.needs} == {"numpy", "torch"}  # installed packages: the ranks' Python must have them
    with zipfile.ZipFile(io.BytesIO(code_ship.blob(modules.digest))) as z:
        assert sorted(z.namelist()) == ["deeper.py", "othermod.py"]
    again = code_ship.ship_code({"mymodel"}, RunOptions(), travels=True)
    assert again.workdir == code.workdir  # unchanged: the same name, nothing read
    (folder / "mymodel.py").write_text("import othermod\nVALUE = 2\n")
    assert code_ship.ship_code({"mymodel"}, RunOptions(), travels=True).workdir.digest != code.workdir.digest


def test_a_working_directory_over_the_cap_is_refused_only_when_it_travels(notebook, monkeypatch):
    folder, _ = notebook
    monkeypatch.setattr(code_ship, "DEFAULT_WORKDIR_MAX_MB", 0.001)
    (folder / "dataset.bin").write_bytes(b"0" * 4000)
    with pytest.raises(LaunchError) as info:
        code_ship.ship_code(set(), RunOptions(), travels=True)
    text = str(info.value)
    assert "dataset.bin (3.9 KB)" in text and "--workdir PATH" in text and "--workdir none" in text
    assert ".gitignore" in text
    local = code_ship.ship_code(set(), RunOptions(), travels=False)  # ranks on this machine use it in place
    with pytest.raises(LaunchError, match="dataset.bin"):  # ... and a host that asks for it all the same is refused
        code_ship.blob(local.workdir.digest)
    assert code_ship.ship_code(set(), RunOptions(workdir="none"), travels=True).workdir is None


def test_bad_code_options_are_refused_with_what_to_do(notebook, tmp_path):
    with pytest.raises(LaunchError, match="no such folder"):
        code_ship.ship_code(set(), RunOptions(workdir=str(tmp_path / "nowhere")), travels=True)
    with pytest.raises(LaunchError, match="cannot read it here"):
        code_ship.ship_code(set(), RunOptions(requirements=str(tmp_path / "missing.txt")), travels=True)
    with pytest.raises(LaunchError, match="build it into a wheel first"):
        code_ship.ship_code(set(), RunOptions(pip=(str(tmp_path),)), travels=True)
    with pytest.raises(OptionsError, match="one requirement each time"):
        RunOptions(pip=("",))
    assert parse_options("--pip numpy --pip 'scikit-learn>=1.5' --workdir none").pip == ("numpy", "scikit-learn>=1.5")


def test_a_local_wheel_travels_by_its_bytes(notebook, tmp_path):
    wheel = tmp_path / "mylib-0.1-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    code = code_ship.ship_code(set(), RunOptions(pip=(str(wheel), "numpy")), travels=True)
    assert code.pip is not None
    [(digest, name)] = code.pip.wheels
    assert name == wheel.name and code.pip.specs == (f"wheel:{digest}", "numpy")
    assert code_ship.blob(digest) == b"not really a wheel"


def _on_a_host_without_the_folder(code: CodeShip, blobs: dict[str, bytes], tmp_path, body: str) -> str:
    """``body`` in a fresh Python (a rank's process) after ``set_up`` of ``code`` whose folders the host cannot see:
    every bundle's root moved to a path that does not exist there. Its stdout."""
    moved = dataclasses.replace(
        code, workdir=code.workdir and dataclasses.replace(code.workdir, root=str(tmp_path / "elsewhere")),
        modules=tuple(dataclasses.replace(b, root=str(tmp_path / "elsewhere2")) for b in code.modules))
    (tmp_path / "ship.pkl").write_bytes(pickle.dumps((moved, blobs)))
    script = textwrap.dedent("""
        import os, pickle, sys
        from jupyter_torchdist.rank import code_setup
        code, blobs = pickle.load(open(sys.argv[1], "rb"))
        setup = code_setup.set_up(code, blobs.__getitem__, "run-1")
    """) + textwrap.dedent(body)
    env = {**os.environ, "TMPDIR": str(tmp_path / "host-tmp"), "PYTHONPATH": str(support.ROOT)}
    (tmp_path / "host-tmp").mkdir(exist_ok=True)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ship.pkl")], capture_output=True, text=True,
                         env=env, cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_host_that_cannot_see_the_folder_runs_in_a_copy_imports_it_first_and_removes_it(notebook, tmp_path):
    code = code_ship.ship_code({"mymodel"}, RunOptions(), travels=True)
    blobs = {b.digest: code_ship.blob(b.digest) for b in code.bundles}
    out = _on_a_host_without_the_folder(code, blobs, tmp_path, """
        import mymodel, helpers, othermod, deeper
        print(mymodel.VALUE, helpers.NAME, deeper.DEEP, open("data.txt").read().strip())
        print(os.getcwd() == setup.run_copy + "/wd", sys.path[0] == os.getcwd())
        runs = os.path.dirname(setup.run_copy)
        setup.close()
        print(sorted(n for n in os.listdir(runs) if not n.endswith(".gate")))
    """)
    assert out.splitlines() == ["1 helpers 3 beside the notebook", "True True", "[]"]


def test_kept_ranks_on_such_a_host_reload_a_module_edited_between_cells(notebook, tmp_path):
    folder, _ = notebook
    first = code_ship.ship_code({"mymodel"}, RunOptions(), travels=True)
    blobs = {b.digest: code_ship.blob(b.digest) for b in first.bundles}  # the first ranks start
    (folder / "mymodel.py").write_text("import othermod\nVALUE = 2\n")  # same size, same second
    second = code_ship.ship_code({"mymodel"}, RunOptions(), travels=True)
    blobs.update({b.digest: code_ship.blob(b.digest) for b in second.bundles})
    second_moved = dataclasses.replace(second, workdir=dataclasses.replace(second.workdir, root="/nowhere"),
                                       modules=tuple(dataclasses.replace(b, root="/nowhere2") for b in second.modules))
    (tmp_path / "second.pkl").write_bytes(pickle.dumps(second_moved))
    out = _on_a_host_without_the_folder(first, blobs, tmp_path, f"""
        import mymodel
        setup.note_loaded()
        print(mymodel.VALUE, code_setup.refresh(setup, pickle.load(open({str(tmp_path / "second.pkl")!r}, "rb")),
                                                blobs.__getitem__), mymodel.VALUE)
        setup.close()
    """)
    assert out.strip() == "1 ['mymodel'] 2"


def test_a_run_folder_whose_ranks_were_all_killed_is_removed_by_the_next_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(code_setup.tempfile, "tempdir", None)
    base = code_setup.cache_folder()
    runs = os.path.join(base, "runs")
    os.makedirs(os.path.join(runs, "dead-1", "wd"))
    for end in (".lock", ".count"):
        open(os.path.join(runs, "dead-1" + end), "w").close()
    old = time.time() - 60
    os.utime(os.path.join(runs, "dead-1.lock"), (old, old))
    code_setup._remove_abandoned(runs)
    assert sorted(os.listdir(runs)) == ["dead-1.gate"]


def test_a_cache_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(code_setup.tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"jupyter-torchdist-{os.getuid()}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(CodeSetupError, match="not this user's own"):
        code_setup.cache_folder()


def test_a_package_the_host_lacks_is_named_with_the_pip_that_sends_it():
    with pytest.raises(CodeSetupError) as info:
        check_needs((NeededImport("jtd_nowhere_pkg", "jtd-nowhere", "1.2"), NeededImport("json")), set())
    assert "`jtd_nowhere_pkg` cannot be imported on" in str(info.value)
    assert "--pip jtd-nowhere==1.2" in str(info.value)
    warnings = check_needs((NeededImport("pytest", "pytest", "0.0.1"),), set())
    assert len(warnings) == 1 and "pytest" in warnings[0] and "0.0.1 in the kernel" in warnings[0]
    assert check_needs((NeededImport("jtd_nowhere_pkg"),), {"jtd_nowhere_pkg"}) == []  # a bundle carries it


def test_the_channel_hands_a_digest_only_to_a_peer_that_holds_the_runs_secret():
    served = {"a" * 64: b"bytes of the bundle"}
    with ChannelServer(2, files=served.get) as server:
        fetch = code_setup.fetcher(server.address, server.secret, 1, None)
        assert fetch("a" * 64) == b"bytes of the bundle"
        with pytest.raises(CodeSetupError, match="no longer has them"):
            fetch("b" * 64)
        with pytest.raises(Exception, match="refused"):
            code_setup.fetcher(server.address, b"x" * 32, 1, None)("a" * 64)
        assert server.connected("rank") == set()  # a files connection is no rank's: it may come again, any time


def test_a_walk_of_a_huge_folder_stops_at_the_cap(tmp_path, monkeypatch):
    for i in range(30):
        (tmp_path / f"f{i:02d}.txt").write_text("x")
    assert len(list_files(str(tmp_path), most=11)) == 11
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(code_ship, "MAX_FILES", 10)
    with pytest.raises(LaunchError, match="in more than 10 files"):
        code_ship.ship_code(set(), RunOptions(), travels=True)


def test_pip_installs_what_a_host_lacks_once_into_an_overlay_and_names_a_failure(tmp_path):
    from jupyter_torchdist.core.contract.code import PipSet
    from jupyter_torchdist.rank.packages import overlay

    from ..support.wheels import make_wheel

    wheel = make_wheel(tmp_path)
    base = tmp_path / "cache"
    (base / "pip").mkdir(parents=True)
    (base / "wheels").mkdir()
    wanted = PipSet(digest="d" * 64, specs=("wheel:" + "w" * 64,), wheels=(("w" * 64, wheel.name),))
    folder = overlay(str(base), wanted, lambda digest: str(wheel))
    assert os.path.isfile(os.path.join(folder, "jtd_travelling_pkg", "__init__.py"))
    assert not os.path.exists(os.path.join(folder, "torch")), "what the host has already is not installed again"
    assert overlay(str(base), wanted, lambda digest: pytest.fail("installed twice")) == folder
    bad = PipSet(digest="e" * 64, specs=("this is not a requirement!",))
    with pytest.raises(CodeSetupError) as info:
        overlay(str(base), bad, lambda digest: "")
    assert "--pip: resolving" in str(info.value) and "failed on" in str(info.value) and "pip exit" in str(info.value)
    assert "pip's last lines" in str(info.value) and info.value.details
    assert not os.path.exists(os.path.join(base, "pip", "e" * 64)), "a failed install leaves no overlay"


def test_a_warm_workers_copy_of_a_module_gives_way_only_when_stale(tmp_path):
    """What a rank forked from a warm worker keeps of a module the worker imported: one from the run's folder,
    unchanged, stays (a worker's startup may have imported it on purpose); one edited since, or from elsewhere, goes."""
    here, elsewhere = tmp_path / "run", tmp_path / "old"
    here.mkdir()
    elsewhere.mkdir()
    (here / "kept_mod.py").write_text("A = 1\n")
    (here / "edited_mod.py").write_text("A = 1\n")
    (elsewhere / "other_mod.py").write_text("A = 1\n")
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path[:0] = [{str(here)!r}, {str(elsewhere)!r}]
        import kept_mod, edited_mod, other_mod
        time.sleep(1.1)
        with open({str(here / "edited_mod.py")!r}, "w") as f:
            f.write("A = 22\\n")
        from jupyter_torchdist.rank.code_setup import _forget
        _forget({{"kept_mod", "edited_mod", "other_mod", "json"}}, [os.path.realpath({str(here)!r})])
        print(sorted(n for n in ("kept_mod", "edited_mod", "other_mod", "json") if n in sys.modules))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # its cache tells an edit
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(support.ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['json', 'kept_mod']"


def test_a_rank_forgets_only_the_import_finders_of_the_runs_folders(tmp_path, monkeypatch):
    """A rank forked from a warm worker drops the finders cached for the run's folders (they import through the run's
    hook now), for relative entries and for misses; every other one stays, uninvalidated: freeing them cost a rank
    10 ms, and invalidating re-read each zip and jar on a Spark worker's path (150 ms)."""
    root = tmp_path / "nb"
    inside_venv = root / ".venv" / "lib" / "python3.11" / "site-packages"
    inside_venv.mkdir(parents=True)

    class Finder:
        def __init__(self) -> None:
            self.invalidated = 0

        def invalidate_caches(self) -> None:
            self.invalidated += 1

    cache = {str(root): Finder(), str(root / "pkg"): Finder(), "": Finder(), "/gone/dir": None,
             str(inside_venv): Finder(), "/opt/spark/jars/spark-core.jar": Finder()}
    monkeypatch.setattr(sys, "path_importer_cache", dict(cache))
    code_setup._refresh_finders([str(root)])
    assert sorted(sys.path_importer_cache) == sorted([str(inside_venv), "/opt/spark/jars/spark-core.jar"])
    assert [f.invalidated for f in sys.path_importer_cache.values()] == [0, 0]
