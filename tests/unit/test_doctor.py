"""``jupyter-torchdist doctor``: each missing piece reported with its fix; the exit status says whether a run can go
(tests/cluster/test_cluster.py checks a real cluster's executors with %distribute_doctor)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jupyter_torchdist.kernel import doctor


def _doctor(*args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return subprocess.run([sys.executable, "-m", "jupyter_torchdist", "doctor", *args], capture_output=True,
                          text=True, env=full, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.slow  # seconds: the doctor in a fresh process
def test_a_missing_java_is_a_warning_with_its_fix_and_runs_can_still_go(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with this Python and nothing else: no java
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    done = _doctor(env={"PATH": str(bin_dir), "JAVA_HOME": None})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARN  Java (for Spark): not found" in done.stdout and "openjdk-17-jre-headless" in done.stdout
    assert "every run goes to local processes" in done.stdout


@pytest.mark.slow  # seconds: the doctor in a fresh process
def test_a_cpu_only_torch_fails_when_gpu_runs_are_expected():
    done = _doctor("--gpu")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  --gpu: torch" in done.stdout and "CPU-only build" in done.stdout
    assert "fix: install a CUDA build of torch" in done.stdout and "thing(s) a run needs are missing" in done.stdout
    [plain] = doctor.check_gpu(required=False)   # the same check in this process: a second command costs seconds
    assert plain.status == "warn" and "runs without --gpu work as they are" in plain.fix, \
        "without --gpu it only limits what runs can do"


def test_a_missing_lab_extension_is_said_with_how_to_install_it(monkeypatch, tmp_path):
    import jupyter_core.paths

    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *parts: [str(tmp_path.joinpath(*parts))])
    [lab, _] = doctor.check_front_end()
    assert lab.status == "warn" and str(tmp_path) in lab.detail and "install from a wheel" in lab.fix


def test_an_unknown_argument_is_a_usage_error():
    done = _doctor("--cluster")
    assert done.returncode == 2 and "doctor takes only --gpu" in done.stderr


def test_the_default_tracker_must_be_installed_and_unsent_records_are_said(monkeypatch, tmp_path):
    import importlib.util

    from jupyter_torchdist.core import track_options
    from jupyter_torchdist.kernel.doctor import check_tracking
    from jupyter_torchdist.tracking.journal import Journal

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(track_options.TRACK_ENV, "mlflow")
    track_options.configure_default(None)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    found = {f.what: f for f in check_tracking()}
    assert found["--track mlflow"].status == "fail" and "jupyter-torchdist[mlflow]" in found["--track mlflow"].fix
    assert found["--track tensorboard"].status == "ok"
    assert {f.what: f.status for f in check_tracking()}["--track wandb"] == "ok"   # not wanted: not needed
    dead = "http://127.0.0.1:9"
    journal = Journal(("mlflow",), dead, to={"mlflow": {"uri": dead}})   # a run's record a kernel left unsent
    journal.append({"k": "run", "key": "run-1"})
    journal.release()
    records = {f.what: f for f in check_tracking()}[f"tracking records for mlflow {dead}"]
    assert records.status == "warn" and "records of 1 run not yet sent" in records.detail
    assert "jupyter-torchdist tracking resend 1" in records.fix and "jupyter-torchdist tracking drop 1" in records.fix
