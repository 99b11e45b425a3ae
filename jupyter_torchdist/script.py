"""A torchrun-style script as a function the ranks can run: its source travels, not its path."""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

__all__ = ["script_function"]


def _run_script(path: str, source: str, args: list[str]) -> Any:
    """Run the script as ``__main__`` with its arguments, as ``python path args...`` would."""
    code = compile(source, path, "exec")
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(code, namespace)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return None


def script_function(argv: list[str]) -> Callable[[], Any]:
    """Read ``argv[0]`` here (the kernel) and return a picklable call that runs it on a rank."""
    path, args = argv[0], list(argv[1:])
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read the script {path!r}: {exc.strerror}") from None
    import functools

    return functools.partial(_run_script, os.path.abspath(path), source, args)
