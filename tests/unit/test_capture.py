"""What cannot travel to the ranks is named before anything launches: the variable, its type, sizes."""
from __future__ import annotations

import re
import socket
import threading

import pytest

import cloudpickle

from jupyter_torchdist.core.errors import CaptureError
from jupyter_torchdist.kernel.pickling import pack
from jupyter_torchdist.kernel.cell import compile_cell

MB = 1 << 20


@pytest.fixture
def ns():
    """A notebook namespace: a lock, a socket, a generator, big and small data, notebook functions/classes."""
    namespace = {"__name__": "__main__"}
    sock = socket.socket()
    namespace.update(lock=threading.Lock(), sock=sock, gen=(i for i in range(3)), big=b"x" * (3 * MB),
                     medium=list(range(100_000)), small=[1, 2, 3])
    exec("def helper():\n    with lock:\n        return 1\n"
         "class Model:\n    def start_on_thread(self):\n        return sock.fileno()\n"
         "class Guarded:\n    guard = lock\n"
         "class Trainer:\n    def __init__(self):\n        self.steps = 3\n        self.mutex = lock\n"
         "trainer = Trainer()\n"
         "def fine(v):\n    return v * 2\n", namespace)
    yield namespace
    sock.close()


@pytest.mark.parametrize("source, name, type_name", [
    ("with lock:\n    pass", "`lock`", "_thread.lock"),
    ("sock.fileno()", "`sock`", "socket.socket"),
    ("next(gen)", "`gen`", "generator"),
    ("helper()", "`helper -> lock`", "_thread.lock"),
    ("Model().go()", "`Model -> sock`", "socket.socket"),
    ("Guarded.guard", "`Guarded.guard`", "_thread.lock"),
    ("trainer.steps", "`trainer.mutex`", "_thread.lock"),
])
def test_unpicklable_variable_is_named_with_its_type(ns, source, name, type_name):
    fn = compile_cell(source, ns).fn
    with pytest.raises(CaptureError) as info:
        pack(fn, max_bytes=64 * MB)
    msg = str(info.value)
    assert f"notebook variable {name} ({type_name})" in msg, msg
    assert "cannot be sent to the ranks" in msg and "inside the cell" in msg


def test_unpicklable_argument_is_named():
    with pytest.raises(CaptureError) as info:
        pack(lambda x, y=None: x, (1,), {"y": threading.Lock()}, max_bytes=MB)
    assert "argument y=" in str(info.value) and "_thread.lock" in str(info.value)


def test_payload_over_the_limit_names_the_biggest_variables(ns):
    fn = compile_cell("len(big) + len(medium) + len(small) + fine(1)", ns).fn
    with pytest.raises(CaptureError) as info:
        pack(fn, max_bytes=1 * MB)
    msg = str(info.value)
    assert "over the limit of 1.0 MB" in msg and "--max-payload-mb" in msg
    order = re.findall(r"`(\w+)` ([\d.]+ [KM]?B)", msg)
    assert [n for n, _ in order[:2]] == ["big", "medium"], msg
    assert order[0][1] == "3.0 MB" and "small" in dict(order)


def test_only_what_the_cell_uses_is_captured(ns):
    """A big variable the cell does not use costs nothing (so the limit only bites on real use)."""
    fn = compile_cell("fine(21) + len(small)", ns).fn
    data = pack(fn, max_bytes=64 * 1024).data
    fn2, args, kwargs = cloudpickle.loads(data)
    assert fn2() == 45 and args == () and kwargs == {}


def test_magic_names_the_lock_before_launching(shell, capsys, monkeypatch):
    from jupyter_torchdist.kernel.runs import driver as launch

    launched = []
    monkeypatch.setattr(launch, "execute", lambda *a, **k: launched.append(a))
    shell.run_cell("import threading\nmy_lock = threading.Lock()\n")
    result = shell.run_cell("%%distribute -n 2\nwith my_lock:\n    x = 1\nx\n")
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert type(result.error_in_exec).__name__ == "CaptureError"
    assert "`my_lock` (_thread.lock)" in text
    assert "Traceback (most recent call last)" not in text
    assert not launched


def test_magic_payload_limit_option(shell, capsys, monkeypatch):
    from jupyter_torchdist.kernel.runs import driver as launch

    monkeypatch.setattr(launch, "execute", lambda *a, **k: pytest.fail("launched despite the payload limit"))
    shell.run_cell("blob = bytes(3 * 1024 * 1024)\n")
    result = shell.run_cell("%%distribute -n 2 --max-payload-mb 1\nlen(blob)\n")
    text = "".join(capsys.readouterr())
    assert type(result.error_in_exec).__name__ == "CaptureError"
    assert "`blob` 3.0 MB" in text and "over the limit of 1.0 MB" in text


def test_the_magic_and_run_raise_the_same_capture_error(shell):
    """One error type for one problem, whichever door the cell came through."""
    import threading

    import jupyter_torchdist as jt

    shell.run_cell("import threading\nmy_lock = threading.Lock()\n")
    from_magic = shell.run_cell("%%distribute -n 2\nwith my_lock:\n    x = 1\n").error_in_exec
    lock = threading.Lock()
    with pytest.raises(CaptureError) as from_api:
        jt.run(lambda: lock.locked(), n=2, local=True)
    assert type(from_magic) is type(from_api.value) is CaptureError
    assert isinstance(from_magic, jt.LaunchError) and "_thread.lock" in str(from_api.value)


def test_shipped_code_keeps_the_cells_filename_so_tracebacks_show_its_lines(ns):
    """cloudpickle 3.1.3+ renames every code object it ships to <dynamic-code>; ours keep the cell's name (and
    the lines registered for it), for the cell's function and for notebook functions it calls."""
    import traceback

    exec(compile("def notebook_helper(x):\n    return 1 / x\n", "Cell In[3]", "exec"), ns)
    compiled = compile_cell("y = notebook_helper(0)\ny", ns, filename="Cell In[7]")
    fn, _, _ = cloudpickle.loads(pack(compiled.fn, max_bytes=MB).data)
    assert fn.__code__.co_filename == "Cell In[7]"
    with pytest.raises(ZeroDivisionError) as info:
        fn()
    text = "".join(traceback.format_exception(info.value))
    assert 'File "Cell In[7]", line 1' in text and "y = notebook_helper(0)" in text
    assert 'File "Cell In[3]", line 2' in text
