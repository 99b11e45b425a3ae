"""--track, --experiment, --logdir, --profile: parsed, defaulted and refused before anything starts."""
from __future__ import annotations

import importlib.util

import pytest

from jupyter_torchdist.core import track_options as T
from jupyter_torchdist.core.errors import OptionsError
from jupyter_torchdist.core.options import RunOptions, parse_options

from ..support import needs


@pytest.fixture(autouse=True)
def no_default(monkeypatch):
    monkeypatch.delenv(T.TRACK_ENV, raising=False)
    T.configure_default(None)
    yield
    T.configure_default(None)


def test_trackers_parse_alone_together_and_off():
    assert parse_options("--track mlflow").track == ("mlflow",)
    assert parse_options("--track mlflow,tensorboard").track == ("mlflow", "tensorboard")
    assert parse_options("--track TensorBoard").track == ("tensorboard",)
    assert parse_options("--track none").track == ()
    assert parse_options("").track == ()


def test_an_unknown_tracker_is_refused_with_the_names_it_takes():
    with pytest.raises(OptionsError, match=r"unknown tracker 'comet'.*mlflow, tensorboard, wandb"):
        parse_options("--track comet")
    assert parse_options("--track wandb --experiment mine").track == ("wandb",)   # the W&B project


def test_the_default_tracker_comes_from_config_then_the_environment_and_a_flag_wins(monkeypatch):
    monkeypatch.setenv(T.TRACK_ENV, "tensorboard")
    assert parse_options("").track == ("tensorboard",)
    T.configure_default("mlflow")
    assert parse_options("").track == ("mlflow",)
    assert parse_options("--track none").track == ()
    assert parse_options("--keep").track == ()   # a default never refuses a kept cell
    monkeypatch.setenv(T.TRACK_ENV, "bogus")
    T.configure_default(None)
    with pytest.raises(OptionsError, match=T.TRACK_ENV):
        parse_options("")


def test_profile_windows():
    assert parse_options("--profile").profile == T.AUTO_WINDOW
    assert parse_options("--profile 5:10").profile == (5, 10)
    assert parse_options("--profile=0:3").profile == (0, 3)
    assert parse_options("--profile 5:10").summary()["profile"] == "5:10"
    assert parse_options("--profile -n 4").profile == T.AUTO_WINDOW and parse_options("--profile -n 4").n == 4
    script = parse_options("-n 2 --profile train.py --lr 0.1")
    assert script.profile == T.AUTO_WINDOW and script.script == ("train.py", "--lr", "0.1")
    for bad in ("10:5", "a:b", "5"):
        with pytest.raises(OptionsError, match="--profile"):
            parse_options(f"--profile {bad}")


@pytest.mark.parametrize("line, said", [
    ("--experiment exp", "use it with --track mlflow or --track wandb"),
    ("--experiment exp --track tensorboard", "names the MLflow experiment or the W&B project"),
    ("--logdir /tmp/x", "use it with --track tensorboard or --profile"),
    ("--track mlflow --keep", "drop --keep"),
    ("--profile --keep", "drop --keep"),
])
def test_options_that_mean_nothing_alone_are_refused(line, said):
    with pytest.raises(OptionsError, match=said):
        parse_options(line)


def test_the_environment_check_refuses_a_folder_that_takes_no_files(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    options = RunOptions(track=("tensorboard",), logdir=str(blocker / "runs"))
    if importlib.util.find_spec("tensorboard") is None:
        pytest.skip("tensorboard is in the test extra")
    with pytest.raises(OptionsError, match=r"--logdir .* cannot take files"):
        T.check_environment(options)
    T.check_environment(RunOptions(profile=(1, 2), logdir=str(tmp_path / "ok")))
    assert (tmp_path / "ok").is_dir() and not list((tmp_path / "ok").iterdir())


def test_a_missing_tracker_is_refused_with_its_pip_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(OptionsError, match=r"pip install 'jupyter-torchdist\[mlflow\]'"):
        T.check_environment(RunOptions(track=("mlflow",)))


def test_only_a_folder_store_is_asked_before_the_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from jupyter_torchdist.tracking.mlflow_sink import check_store

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    for uri in (None, "http://127.0.0.1:9", "databricks", f"sqlite:///{tmp_path / 'm.db'}"):
        check_store(uri)   # servers and databases are not asked (one that is down is waited for)
    assert not (tmp_path / "m.db").exists()
    with pytest.raises(OptionsError, match=r"does not take the tracking store .*MLFLOW_ALLOW_FILE_STORE"):
        check_store(str(tmp_path / "mlruns"))   # MLflow 3 refuses a folder store unless allowed
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_store((tmp_path / "mlruns").as_uri())


PREFETCH = """
import os, sys, threading, time
from jupyter_torchdist import tracking
assert 'mlflow' not in sys.modules
os.environ['JUPYTER_TORCHDIST_TRACK'] = 'comet'
tracking.prefetch_defaults()                    # a setting naming no tracker: left for the first run to refuse
assert not [t for t in threading.enumerate() if t.name == 'jupyter-torchdist-tracker-import']
os.environ['JUPYTER_TORCHDIST_TRACK'] = 'mlflow'
t0 = time.perf_counter()
tracking.prefetch_defaults()
returned = time.perf_counter() - t0
[thread] = [t for t in threading.enumerate() if t.name == 'jupyter-torchdist-tracker-import']
thread.join(120)
print('mlflow' in sys.modules, returned < 0.5, tracking.prefetch(['mlflow']) is None)
"""


@pytest.mark.slow   # a fresh process imports MLflow: seconds
@needs("mlflow")
def test_a_default_tracker_is_imported_on_a_thread_before_the_first_run_asks():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != T.TRACK_ENV}
    done = subprocess.run([sys.executable, "-c", PREFETCH], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"], done.stdout
