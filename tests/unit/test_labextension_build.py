"""A clone installs without Node.js: the front end (the JupyterLab extension and the live view's bundle) is committed
built, with the stamp of the sources it was built from, and the build hook (hatch_build.py) rebuilds it only when a
source differs from the stamp."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_front_end_build_is_the_build_of_the_sources_beside_it():
    hook = _hook()
    missing = [p for p in (*hook.BUILT, hook.STAMP) if not (ROOT / p).is_file()]
    assert not missing, f"the built front end is missing: {missing}"
    assert hook.committed_build_matches(ROOT), (
        "labextension/ changed since its build: run `cd labextension && jlpm build:prod` (Node.js 20) and commit "
        "jupyter_torchdist/labextension/ and jupyter_torchdist/static/ with the change, so that a clone installs "
        "without Node.js")


def test_the_digest_sees_every_source_and_nothing_the_build_writes(tmp_path: Path):
    hook = _hook()
    names = {p.relative_to(ROOT / "labextension").as_posix() for p in hook.source_files(ROOT)}
    assert {"package.json", "yarn.lock", "tsconfig.json", "build-widget.mjs", "src/index.ts"} <= names
    assert not {n for n in names if n.split("/")[0] in ("node_modules", "lib", ".yarn")}
    copy = tmp_path / "labextension"
    shutil.copytree(ROOT / "labextension" / "src", copy / "src")
    before = hook.sources_digest(tmp_path)
    (copy / "src" / "index.ts").write_text((copy / "src" / "index.ts").read_text() + "\n// changed\n")
    assert hook.sources_digest(tmp_path) != before


def test_a_stale_build_without_node_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no node here
    with pytest.raises(RuntimeError, match=r"needs Node\.js 20 on PATH.*SKIP_JUPYTER_BUILDER=1"):
        _hook().build(tmp_path)


@pytest.mark.slow
def test_a_clone_builds_its_wheel_with_the_extension_and_no_node_on_path(tmp_path: Path):
    """A clone of the committed tree, pip's own build (isolated: hatchling from the index), a PATH with Python alone."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True, timeout=120)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "SKIP_JUPYTER_BUILDER"}
    env["PATH"] = str(bin_dir)
    assert shutil.which("node", path=env["PATH"]) is None and shutil.which("jlpm", path=env["PATH"]) is None
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(clone)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("jupyter_torchdist-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    share = next(n for n in names if n.endswith("share/jupyter/labextensions/jupyter-torchdist/package.json"))
    assert share and "jupyter_torchdist/static/widget.js" in names and "jupyter_torchdist/static/widget.css" in names
    assert any(n.startswith(share.rsplit("/", 1)[0] + "/static/remoteEntry.") for n in names)
    assert not [n for n in names if n.startswith("jupyter_torchdist/labextension/")], "packed once, under share/"
