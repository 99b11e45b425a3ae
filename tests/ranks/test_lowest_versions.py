"""The lowest versions pyproject allows are the versions tested: pyspark, IPython, ipywidgets, anywidget and cloudpickle
at their lower bounds (read from pyproject.toml, so the bounds and this test cannot drift apart) run the tests that
touch what differs between their versions: the magic's parsing, the live view, the launch checks, the Spark launcher
on the embedded session, the interrupt's scope, the idle release. torch's lower bound is the version CI installs.

They are installed beside the suite's own (``pip install --target``, shadowing the venv's through PYTHONPATH), once
per set of bounds, under build/ (git-ignored)."""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from ..support import ROOT

pytestmark = pytest.mark.spark

LOWEST = ("pyspark", "ipython", "ipywidgets", "anywidget", "cloudpickle")
# what IPython 8.0 imports that later IPythons dropped (so the venv does not have them)
OLD_IPYTHONS_OWN = ("pickleshare", "backcall", "decorator")
TESTS = ["tests/unit/test_options.py", "tests/unit/test_cell.py", "tests/unit/test_live_view.py",
         "tests/unit/test_torch_distributor_api.py", "tests/unit/test_prelaunch_checks.py",
         "tests/unit/test_spark_security.py", "tests/unit/test_interrupt_scope.py",
         "tests/unit/test_run_never_hangs.py", "tests/ranks/test_run_spark.py",
         "tests/ranks/test_idle_release_spark.py"]


def lower_bounds() -> dict[str, str]:
    """Each core dependency's lower bound, from pyproject.toml."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = {}
    for dep in deps:
        m = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,\s]*)", dep)
        if m:
            bounds[m[1].lower()] = m[2]
    return bounds


def install_lowest() -> Path:
    """The lowest versions, installed once per set of bounds under build/ (git-ignored); their folder. ``.ci/run``
    starts this beside the lint and the type checks (``python -m tests.ranks.test_lowest_versions``), so the test
    usually finds it done; a lock makes the test wait for an install under way rather than start a second."""
    bounds = lower_bounds()
    pins = [f"{name}=={bounds[name]}" for name in LOWEST]
    target = ROOT / "build" / "lowest-versions" / hashlib.sha1(" ".join(pins).encode()).hexdigest()[:12]
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").exists():
            done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                                   *pins, *OLD_IPYTHONS_OWN], capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
            (target / ".complete").write_text("\n".join(pins))
    return target


def test_torchs_lower_bound_is_the_version_ci_runs():
    import torch

    assert Version(torch.__version__.split("+")[0]) == Version(lower_bounds()["torch"])


def test_the_lowest_allowed_versions_pass_the_tests_that_touch_them(tmp_path):
    bounds = lower_bounds()
    target = install_lowest()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))}
    seen = subprocess.run([sys.executable, "-c", "import pyspark, IPython, ipywidgets, anywidget, cloudpickle as c; "
                           "print(pyspark.__version__, IPython.__version__, ipywidgets.__version__, "
                           "anywidget.__version__, c.__version__)"], capture_output=True, text=True, env=env)
    assert [Version(v) for v in seen.stdout.split()] == [Version(bounds[name]) for name in LOWEST], \
        seen.stdout + seen.stderr
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *TESTS],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


if __name__ == "__main__":
    install_lowest()
