"""torchrun-style scripts: run as __main__ with their argv and sibling modules; exits and errors name the rank."""
from __future__ import annotations

import os
import re
import shutil
import time

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.errors import RunFailed
from jupyter_torchdist.kernel.script import MAX_SIBLING_BYTES, collect_siblings, script_function

from .conftest import descendants_of
from .kernel import Kernel

TRAIN = '''\
import argparse, os, pickle, sys
import torch
import torch.distributed as dist
from helpers_mod import SCALE
from pkg.sub import twice


class Point:  # defined in the script: pickled by reference to the script's __main__
    def __init__(self, x):
        self.x = x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exit-on", type=int, default=-1)
    p.add_argument("--code", default="3")
    p.add_argument("--raise-on", type=int, default=-1)
    a = p.parse_args()
    dist.init_process_group("gloo", init_method="env://")  # torchrun scripts do this; the group is up
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert dist.get_rank() == rank and dist.get_world_size() == world
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    same = pickle.loads(pickle.dumps(Point(rank))).x == rank
    print(f"rank={rank} local={os.environ['LOCAL_RANK']} sum={t.item()} scale={SCALE} twice={twice(3)} "
          f"argv={sys.argv[1:]} file={os.path.basename(__file__)} pickled={same}")
    if a.exit_on in (rank, -2):  # -2: every rank
        sys.exit(int(a.code) if a.code.isdigit() else a.code)
    if rank == a.raise_on:
        raise RuntimeError("broken on purpose")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "helpers_mod.py").write_text("SCALE = 7\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub.py").write_text("def twice(x):\n    return 2 * x\n")
    return tmp_path


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


def test_line_magic_runs_a_script_in_a_real_kernel(project):
    kernel = Kernel()
    try:
        assert kernel.execute("%load_ext jupyter_torchdist")["status"] == "ok"
        r = kernel.execute(f"%cd {project}\n%distribute -n 2 --local train.py --code 0")
        assert r["status"] == "ok", kernel.text(r)
        assert not [o for o in r["outputs"] if o["output_type"] == "execute_result"], "a script has no value"
        reports = [o["data"]["application/vnd.jupyter-torchdist.run+json"] for o in r["outputs"]
                   if "application/vnd.jupyter-torchdist.run+json" in o.get("data", {})]
        assert reports and reports[-1]["status"] == "succeeded" and reports[-1]["backend"] == "local"
        assert any("argv=['--code', '0']" in line for _, line in reports[-1]["ranks"][1]["log_tail"])
        r = kernel.execute("%distribute -n 2 --local train.py --exit-on 1 --code 3")
        assert r["status"] == "error" and r["error"]["ename"] == "RunFailed"
        text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(r["error"]["traceback"]))
        assert "rank 1" in text and "code 3" in text
        family = descendants_of(kernel.pid) if kernel.pid else set()
        assert family, "the kernel's zygote is its child"
    finally:
        kernel.shutdown()
    assert _all_gone(family), "the zygote, agents or ranks outlived the kernel"


def _all_gone(pids: set[int], within: float = 30.0) -> bool:
    end = time.monotonic() + within
    while any(os.path.exists(f"/proc/{p}") and _state(p) != "Z" for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"



def _destroy_then_ask() -> bool:
    import torch.distributed as dist

    dist.destroy_process_group()  # as scripts end: accepted, the group is the runtime's
    return dist.is_initialized()


def test_a_scripts_own_destroy_process_group_leaves_the_group_to_the_runtime():
    assert jt.run(_destroy_then_ask, n=2, local=True) is True


def test_a_ddp_script_that_destroys_its_group_never_hangs_on_exit():
    """A DDP model freed after destroy_process_group() used to deadlock in torch's gloo teardown
    (the GIL held while joining a thread that needs it) in about 1 run in 8 on a busy machine."""
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "train_script.py")
    for _ in range(12):
        assert jt.run(script_function([script, "--epochs", "1", "--batch-size", "256"]), n=2, local=True,
                      timeout=60) is None
