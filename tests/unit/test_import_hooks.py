"""Patches that wait for a module's first import (the rank's tqdm and Trainer bridges): run once, right after the
module executes, never breaking the import; a Trainer class is wrapped once however often it is patched."""
from __future__ import annotations

import sys

from jupyter_torchdist.rank.import_hooks import patch_on_import
from jupyter_torchdist.rank.trainer_bridge import _after_init, _numbers


def test_a_patch_runs_after_the_first_import_and_a_failing_one_leaves_the_module(tmp_path, monkeypatch):
    (tmp_path / "jt_hook_a.py").write_text("X = 1\n")
    (tmp_path / "jt_hook_b.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    finders = list(sys.meta_path)
    try:
        patch_on_import({"jt_hook_a": lambda m: seen.append(m.X), "jt_hook_b": lambda m: 1 / 0})
        import jt_hook_a
        import jt_hook_b
        assert seen == [1] and jt_hook_b.Y == 2
        del sys.modules["jt_hook_a"]
        import jt_hook_a  # noqa: F401,F811  (a second import: the patch ran once)
        assert seen == [1]
    finally:
        sys.meta_path[:] = finders
        for name in ("jt_hook_a", "jt_hook_b"):
            sys.modules.pop(name, None)


def test_an_already_imported_module_is_patched_at_once():
    seen = []
    patch_on_import({"json": lambda m: seen.append(m.__name__)})
    assert seen == ["json"]


def test_a_trainer_class_is_wrapped_once_and_attach_errors_are_swallowed():
    class Trainer:
        def __init__(self, n):
            self.n, self.attached = n, 0

    calls = []
    _after_init(Trainer, lambda t: calls.append(t.n))
    _after_init(Trainer, lambda t: calls.append(-t.n))  # the second patch of the same class: no second callback
    Trainer(3)
    assert calls == [3]

    class Broken:
        def __init__(self):
            self.ok = True

    _after_init(Broken, lambda t: 1 / 0)
    assert Broken().ok


def test_logged_metrics_keep_scalars_only():
    import torch

    got = _numbers({"loss": torch.tensor(0.5), "v": torch.ones(3), "lr": 0.1, "nan": float("nan"), "flag": True,
                    "name": "x"})
    assert set(got) == {"loss", "lr"}
