"""A real IPython kernel for tests: execute cells, collect outputs as a front end would see them."""
from __future__ import annotations

import contextlib
import os
import queue
import time
from collections.abc import Callable, Iterator
from typing import Any, Union

from jupyter_client.manager import KernelManager

from .procs import all_gone, descendants_of, process_alive

# What a test types at input() prompts: a function of the prompt (None: leave it unanswered), or the lines in order
Answers = Union[Callable[[str], Union[str, None]], list[str]]
Watch = Callable[[dict[str, Any]], None]


class Kernel:
    def __init__(self, extra_env: dict[str, str | None] | None = None, cwd: str | None = None) -> None:
        """A kernel with this process's environment and ``extra_env`` (a None value removes the variable), started in
        ``cwd`` (the notebook's folder; default this process's)."""
        env = dict(os.environ)
        for key, value in (extra_env or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, **({"cwd": cwd} if cwd else {}))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.pid = self.km.provisioner.process.pid if self.km.provisioner else None

    def execute(self, code: str, timeout: float = 180, interrupt_after: float | None = None,
                answers: Answers | None = None, watch: Watch | None = None,
                interrupt_when: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Run a cell; returns {'status', 'outputs', 'error', 'payload', 'seconds', 'prompts'} (display updates
        applied). With ``answers`` the cell may call input(): each prompt is answered (and kept in 'prompts').
        ``watch`` sees every message the cell sends on iopub as it comes (widget updates included).
        ``interrupt_when``: interrupt the kernel once it returns true (asked between messages), as a user who waits
        for what the cell shows would (a loaded machine makes a fixed ``interrupt_after`` a race)."""
        t0 = time.monotonic()
        msg_id = self.kc.execute(code, allow_stdin=answers is not None)
        outputs: list[dict[str, Any]] = []
        by_display: dict[str, int] = {}
        interrupted = False
        prompts: list[str] = []
        while True:
            if not interrupted and (interrupt_when() if interrupt_when is not None else (
                    interrupt_after is not None and time.monotonic() - t0 > interrupt_after)):
                self.km.interrupt_kernel()
                interrupted = True
            if answers is not None:
                self._answer(answers, prompts)
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"cell did not finish in {timeout}s: {code[:80]!r}") from None
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if watch is not None:
                watch(msg)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind in ("stream", "display_data", "execute_result", "error"):
                out = dict(content, output_type=kind)
                display_id = content.get("transient", {}).get("display_id")
                if display_id:
                    by_display[display_id] = len(outputs)
                outputs.append(out)
            elif kind == "update_display_data":
                display_id = content.get("transient", {}).get("display_id")
                if display_id in by_display:
                    outputs[by_display[display_id]] = dict(content, output_type="display_data")
        reply = self.kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.kc.get_shell_msg(timeout=30)
        errors = [o for o in outputs if o["output_type"] == "error"]
        return {"status": reply["content"]["status"], "outputs": outputs, "error": errors[0] if errors else None,
                "payload": reply["content"].get("payload", []), "seconds": time.monotonic() - t0,
                "execution_count": reply["content"].get("execution_count"), "prompts": prompts}

    def _answer(self, answers: Answers, prompts: list[str]) -> None:
        """Answer an input_request waiting on the stdin channel, as a front end's input box would."""
        try:
            msg = self.kc.get_stdin_msg(timeout=0.01)
        except queue.Empty:
            return
        if msg["msg_type"] != "input_request":
            return
        prompt = msg["content"]["prompt"]
        prompts.append(prompt)
        line = answers(prompt) if callable(answers) else (answers.pop(0) if answers else "")
        if line is not None:
            self.kc.input(line)

    def ok(self, code: str, **kw: Any) -> str:
        """Run ``code``, which must succeed (else the assertion shows its output), and give its output as text."""
        result = self.execute(code, **kw)
        assert result["status"] == "ok", self.text(result)
        return self.text(result).strip()

    def text(self, result: dict[str, Any]) -> str:
        """Everything a user would read: streams, plain-text data, error tracebacks. Consecutive messages of one
        stream are joined end to end, as a front end shows them (one print may arrive in several messages)."""
        parts: list[str] = []
        last_stream = None
        for o in result["outputs"]:
            stream = o.get("name") if o["output_type"] == "stream" else None
            if stream is not None and stream == last_stream:
                parts[-1] += o["text"]
            elif stream is not None:
                parts.append(o["text"])
            elif o["output_type"] == "error":
                parts.append("\n".join(o["traceback"]))
            else:
                parts.append(str(o.get("data", {}).get("text/plain", "")))
            last_stream = stream
        return "\n".join(parts)

    def shutdown(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)


@contextlib.contextmanager
def loaded_kernel(extra_env: dict[str, str] | None = None, setup: str = "", cwd: str | None = None) -> Iterator[Kernel]:
    """A kernel (started in ``cwd``, its notebook's folder) with ``%load_ext jupyter_torchdist`` (and ``setup``) run;
    at the end, shut down and checked that none of its processes (JVM, Python workers, ranks) outlived it."""
    k = Kernel(extra_env, cwd=cwd)
    try:
        r = k.execute("%load_ext jupyter_torchdist" + (f"\n{setup}" if setup else ""))
        assert r["status"] == "ok", k.text(r)
        yield k
    finally:
        family = descendants_of(k.pid) if k.pid else set()  # listed before: once the kernel is gone they are orphans
        k.shutdown()
    assert all_gone(family, 15.0), f"processes outlived the kernel: {sorted(p for p in family if process_alive(p))}"
