"""torchrun-style scripts: run as __main__ with their argv and sibling modules; exits and errors name the rank."""
from __future__ import annotations

import shutil

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import RunFailed
from jupyter_torchdist.kernel.script_source import MAX_SIBLING_BYTES, collect_siblings, script_function

from ..support import EXAMPLES
from ..support.script_project import TRAIN, make_project


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path)


def _lines(result, rank):
    return [text for _, text in result.logs[rank]]


def test_script_runs_as_main_with_argv_and_sibling_modules(project):
    result = jt.run_detailed(script_function([str(project / "train.py"), "--code", "0"]), n=2, local=True)
    assert result.value is None
    for rank in (0, 1):
        assert (f"rank={rank} local={rank} sum=3.0 scale=7 twice=6 argv=['--code', '0'] file=train.py pickled=True"
                in _lines(result, rank))


def test_siblings_travel_with_the_script_when_its_folder_is_not_there(project, tmp_path_factory):
    moved = tmp_path_factory.mktemp("elsewhere") / "proj"
    shutil.copytree(project, moved)
    fn = script_function([str(moved / "train.py")])
    assert set(fn.siblings) == {"helpers_mod", "pkg/", "pkg.sub"}
    shutil.rmtree(moved)  # as on an executor that has no copy of the folder
    result = jt.run_detailed(fn, n=2, local=True)
    assert any("scale=7 twice=6" in line for line in _lines(result, 1))


def test_exit_code_names_the_rank_and_the_code(project):
    with pytest.raises(RunFailed) as info:
        jt.run(script_function([str(project / "train.py"), "--exit-on", "1", "--code", "3"]), n=2, local=True)
    assert info.value.rank == 1
    assert "rank 1" in str(info.value) and "exited with code 3" in str(info.value)


def test_exit_zero_is_success_and_exit_with_a_message_is_code_1(project):
    assert jt.run(script_function([str(project / "train.py"), "--exit-on", "-2", "--code", "0"]), n=2,
                  local=True) is None
    with pytest.raises(RunFailed) as info:
        jt.run(script_function([str(project / "train.py"), "--exit-on", "0", "--code", "bad-input"]), n=2,
               local=True)
    assert info.value.rank == 0 and "exited with code 1" in str(info.value)
    logs = info.value.result.logs[0]
    assert ("stderr", "bad-input") in logs


def test_exception_traceback_shows_the_scripts_own_line_even_after_the_file_changed(project):
    fn = script_function([str(project / "train.py"), "--raise-on", "1"])
    (project / "train.py").write_text("# rewritten after the run was submitted\n")
    with pytest.raises(RunFailed) as info:
        jt.run(fn, n=2, local=True)
    err = info.value
    assert err.rank == 1 and "RuntimeError: broken on purpose" in err.root.summary
    line = next(i for i, text in enumerate(TRAIN.splitlines(), 1) if "broken on purpose" in text)
    assert f'train.py", line {line}, in main' in err.root.traceback
    assert 'raise RuntimeError("broken on purpose")' in err.root.traceback
    assert "jupyter_torchdist" not in err.root.traceback


def test_sibling_collection_is_bounded(tmp_path):
    (tmp_path / "small.py").write_text("X = 1\n")
    (tmp_path / "not-a-module.py").write_text("X = 1\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "junk.py").write_text("")
    (tmp_path / "data").mkdir()  # no __init__.py: not a package
    (tmp_path / "data" / "x.py").write_text("")
    assert collect_siblings(str(tmp_path)) == {"small": "X = 1\n"}
    (tmp_path / "huge.py").write_text("#" * (MAX_SIBLING_BYTES + 1))
    assert collect_siblings(str(tmp_path)) == {}  # a whole project: rely on the filesystem instead


def test_missing_script_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot read the script"):
        script_function([str(tmp_path / "nope.py")])


@pytest.mark.spark
def test_script_on_spark(spark, project):
    result = jt.run_detailed(script_function([str(project / "train.py")]), n=2)
    assert result.state.backend.startswith("spark")
    assert any("sum=3.0 scale=7" in line for line in _lines(result, 1))


def _destroy_then_ask() -> bool:
    import torch.distributed as dist

    dist.destroy_process_group()  # as scripts end: accepted, the group is the runtime's
    return dist.is_initialized()


def test_a_scripts_own_destroy_process_group_leaves_the_group_to_the_runtime():
    assert jt.run(_destroy_then_ask, n=2, local=True) is True


def test_a_ddp_script_that_destroys_its_group_never_hangs_on_exit():
    """A DDP model freed after destroy_process_group() used to deadlock in torch's gloo teardown
    (the GIL held while joining a thread that needs it) in about 1 run in 8 on a busy machine."""
    script = str(EXAMPLES / "train_script.py")
    for _ in range(12):
        assert jt.run(script_function([script, "--epochs", "1", "--batch-size", "256"]), n=2, local=True,
                      timeout=60) is None
