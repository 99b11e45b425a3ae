"""Limits a server's administrator sets for every notebook (launchers/limits.py): refused before anything starts,
saying which limit and who set it; the environment wins over the extension's configuration."""
from __future__ import annotations

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.launchers import limits


@pytest.fixture(autouse=True)
def no_limits(monkeypatch):
    for name in limits.ENV.values():
        monkeypatch.delenv(name, raising=False)
    limits.configure(local_ranks=None, embedded_ranks=None, background_runs=None)
    yield
    limits.configure(local_ranks=None, embedded_ranks=None, background_runs=None)


def test_local_ranks_past_the_environments_limit_are_refused_naming_it(monkeypatch, descendants):
    monkeypatch.setenv("JUPYTER_TORCHDIST_MAX_LOCAL_RANKS", "2")
    before = descendants()
    with pytest.raises(LaunchError, match=r"-n 3 asks for 3 ranks as local processes on this machine, but this "
                                          r"server allows at most 2 .*JUPYTER_TORCHDIST_MAX_LOCAL_RANKS=2, set by its "
                                          r"administrator\). Ask for at most 2"):
        jt.run(len, [1], n=3, local=True)
    assert descendants() <= before, "nothing started"


def test_the_environment_wins_over_the_configuration_and_zero_means_none(monkeypatch):
    limits.configure(local_ranks=2, background_runs=3)
    assert limits.current() == limits.Limits(local_ranks=2, background_runs=3)
    monkeypatch.setenv("JUPYTER_TORCHDIST_MAX_LOCAL_RANKS", "8")
    assert limits.current().local_ranks == 8
    monkeypatch.setenv("JUPYTER_TORCHDIST_MAX_LOCAL_RANKS", "0")
    assert limits.current().local_ranks is None
    monkeypatch.setenv("JUPYTER_TORCHDIST_MAX_LOCAL_RANKS", "four")
    with pytest.raises(LaunchError, match="not a whole number"):
        limits.current()


def test_background_runs_and_sweeps_past_the_limit_are_refused():
    limits.configure(background_runs=2)
    assert limits.check_background(1) == 2
    with pytest.raises(LaunchError, match=r"2 background runs or sweeps of this notebook are going, but this server "
                                          r"allows at most 2 .*c.DistributeMagics.max_background_runs = 2"):
        limits.check_background(2)
    with pytest.raises(LaunchError, match="--concurrent 3 asks for 3 runs at once"):
        limits.check_background(0, concurrent=3)


def test_the_magics_configuration_sets_the_limits(shell):
    shell.run_line_magic("config", "DistributeMagics.max_local_ranks = 2")
    result = shell.run_cell("%%distribute -n 3 --local\n1")
    assert isinstance(result.error_in_exec, LaunchError) and "max_local_ranks = 2" in str(result.error_in_exec)
    shell.run_line_magic("config", "DistributeMagics.max_local_ranks = 0")
    assert limits.current().local_ranks is None
