"""DeepspeedTorchDistributor's constructor and file runs decide what pyspark's do, before anything runs: ranks as
numGpus * nnodes, the config as given (a dict, a path, None), the command line a file gets, errors in this class's
argument names, pyspark's encryption switch for it and deepspeed among what every rank's Python must have. Real
runs (torchrun's numbers, Spark tasks): ranks/test_deepspeed.py."""
from __future__ import annotations

import json

import pytest

from jupyter_torchdist import DeepspeedTorchDistributor
from jupyter_torchdist.core.travel import local_versions, unfit
from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.kernel.compat import deepspeed_distributor as dd
from jupyter_torchdist.kernel.compat import torch_distributor as td
from jupyter_torchdist.rank.script import WithConfigFile
from jupyter_torchdist.rank.script import Script


@pytest.fixture(autouse=True)
def no_session(monkeypatch):
    monkeypatch.setattr(td, "_notebook_session", lambda: None)


def test_ranks_are_gpus_times_nodes_with_pysparks_attributes():
    d = DeepspeedTorchDistributor(numGpus=2, nnodes=3, localMode=False, useGpu=False, deepspeedConfig={"a": 1})
    assert (d.num_processes, d.num_tasks, d.local_mode, d.use_gpu) == (6, 6, False, False)
    assert d.deepspeed_config == {"a": 1} and d.cleanup_deepspeed_conf is False
    assert d.ssl_conf == "deepspeed.spark.distributor.ignoreSsl" and d._packages == ("deepspeed",)
    assert "num_processes=6" in repr(d)


@pytest.mark.parametrize("kw", [{"numGpus": 0}, {"nnodes": -1}, {"numGpus": 1.5}, {"nnodes": True}])
def test_counts_must_be_positive_integers(kw):
    with pytest.raises(ValueError, match="has to be a positive integer"):
        DeepspeedTorchDistributor(useGpu=False, **kw)


def test_config_forms(tmp_path, monkeypatch):
    with pytest.raises(TypeError, match="a dict, a path to a JSON file or None"):
        DeepspeedTorchDistributor(useGpu=False, deepspeedConfig=3)
    with pytest.raises(ValueError, match="JSON-serialisable"):
        DeepspeedTorchDistributor(useGpu=False, deepspeedConfig={"f": object()})
    with pytest.raises(FileNotFoundError, match="localMode=True"):
        DeepspeedTorchDistributor(useGpu=False, deepspeedConfig="nowhere.json")
    # on a cluster the executors may have a path this machine lacks: theirs to read
    assert DeepspeedTorchDistributor(useGpu=False, localMode=False, deepspeedConfig="/dbfs/ds.json")._config == \
        "/dbfs/ds.json"
    (tmp_path / "ds.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert DeepspeedTorchDistributor(useGpu=False, deepspeedConfig="ds.json")._config == str(tmp_path / "ds.json")


def _argv(call):
    script = call.script if isinstance(call, WithConfigFile) else call
    return [script.path.rsplit("/", 1)[-1], *script.args]


def test_a_file_gets_its_args_then_deepspeeds(tmp_path):
    train = tmp_path / "train.py"
    train.write_text("pass\n")
    (tmp_path / "ds.json").write_text("{}")
    plain = DeepspeedTorchDistributor(useGpu=False)._script(str(train), (1, "--x"), {})
    assert _argv(plain) == ["train.py", "1", "--x", "--deepspeed"]
    path = DeepspeedTorchDistributor(useGpu=False, deepspeedConfig=str(tmp_path / "ds.json"))._script(str(train), (),
                                                                                                         {})
    assert _argv(path) == ["train.py", "--deepspeed", "--deepspeed_config", str(tmp_path / "ds.json")]
    as_dict = DeepspeedTorchDistributor(useGpu=False, deepspeedConfig={"train_batch_size": 8})._script(str(train), (),
                                                                                                          {})
    assert isinstance(as_dict, WithConfigFile) and _argv(as_dict) == ["train.py", "--deepspeed"]
    assert as_dict.flag == "--deepspeed_config" and json.loads(as_dict.text) == {"train_batch_size": 8}
    with pytest.raises(ValueError, match="doesn't support keyword arguments"):
        DeepspeedTorchDistributor(useGpu=False)._script(str(train), (), {"lr": 1})


def test_the_config_file_is_written_on_the_ranks_host_for_the_script_and_removed(tmp_path):
    script = tmp_path / "show.py"
    source = "import sys, json\nRESULT.append((sys.argv[1:], json.load(open(sys.argv[-1]))))\n"
    seen: list = []
    call = WithConfigFile(Script(str(script), source, ("--deepspeed",)), "--deepspeed_config", '{"stage": 2}')
    import builtins
    builtins.RESULT = seen  # type: ignore[attr-defined]
    try:
        call()
    finally:
        del builtins.RESULT  # type: ignore[attr-defined]
    (args, config), = seen
    assert args[:2] == ["--deepspeed", "--deepspeed_config"] and config == {"stage": 2}
    assert not __import__("os").path.exists(args[2])


def test_gpu_errors_name_this_classes_arguments():
    with pytest.raises(LaunchError) as caught:
        DeepspeedTorchDistributor(numGpus=2)  # useGpu defaults to True, as in pyspark; no GPU here
    assert "useGpu=False" in str(caught.value) and "use_gpu=" not in str(caught.value)


def test_every_rank_must_have_the_kernels_deepspeed():
    kernel = tuple(local_versions(("deepspeed", "no-such-package-here")).items())
    assert dict(kernel)["no-such-package-here"] == "missing"
    assert unfit(kernel) is None  # the same Python: nothing differs
    want = tuple((k, "9.9" if k == "deepspeed" else v) for k, v in kernel)
    assert "deepspeed " in unfit(want) and "9.9 in the kernel" in unfit(want)


def test_the_module_says_what_it_exports():
    assert dd.__all__ == ["DeepspeedTorchDistributor", "DEEPSPEED_IGNORE_SSL_KEY"]
