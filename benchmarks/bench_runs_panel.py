"""The runs panel's cost with 50 runs listed (issue 52): the panel's traffic in a real JupyterLab in Chromium, and the
CPU the kernels' publishers add, against the live view's budgets (docs/performance.md: a view's traffic <= 150 KB/s,
the kernel's CPU <= 0.30 of a core for a whole 1,024-rank run).

Five real kernels (jupyter_client, as a server starts them) with the extension loaded each start ten background runs
(simulated ranks: the real channel protocol, each rank reporting every ``--every`` s, no torch), so the registry lists
50 runs whose steps all move. A JupyterLab server on the same runtime directory shows them in the "Distributed runs"
panel, on show in Chromium; the Chrome DevTools protocol counts every byte of the panel's requests and answers.
Rounds alternate the publishers on and off (``publisher.stop``/``start`` in each kernel), for the kernels' CPU with
and without them; the publisher thread's own CPU is read from /proc as well. Last, every run is stopped and the
panel's traffic measured with nothing changing (a poll every 5 s, each a bodiless 304).

    .venv/bin/python benchmarks/bench_runs_panel.py [--rounds 3] [--window 15]
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
from kernel_session import KernelSession

sys.path.insert(0, common.REPO)
from tests.support.browser import Lab  # the browser tests' JupyterLab harness

KERNELS, RUNS_PER_KERNEL = 5, 10
SIM_RUN = "%%distribute -n 2 --background --quiet\npass"
PROBE = """
import os
from jupyter_torchdist.panel import publisher as _pub
def _panel_probe():
    p = _pub.current()
    if p is None or not p._thread.is_alive():
        return {"cpu": None, "writes": None}
    with open(f"/proc/self/task/{p._thread.native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return {"cpu": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), "writes": p.writes}
"""
TARGETS = {"panel_kbs": 150.0, "publishers_cores": 0.30}


def parse_args() -> Any:
    p = common.parser(__doc__)
    p.add_argument("--rounds", type=int, default=3, help="rounds of (publishers on, publishers off)")
    p.add_argument("--window", type=float, default=15.0, help="seconds measured per phase")
    p.add_argument("--every", type=float, default=0.2, help="seconds between a simulated rank's reports")
    return p.parse_args()


def start_kernels(runtime: Path, every: float) -> list[KernelSession]:
    spec = f"steps=1000000,every={every},log_every=0,hosts=1"
    kernels = []
    for k in range(KERNELS):
        ks = KernelSession(env={"JUPYTER_RUNTIME_DIR": str(runtime), "JPY_SESSION_NAME": f"notebook-{k}.ipynb",
                                "JUPYTER_TORCHDIST_WARMUP": "0", "JUPYTER_TORCHDIST_SIMULATE": spec})
        ks.run("%load_ext jupyter_torchdist")
        ks.run(f"import sys\nsys.path.insert(0, {common.REPO!r})\n"
               "from tests.support import simulated\nsimulated.enable()\n" + PROBE)
        for _ in range(RUNS_PER_KERNEL):
            ks.run(SIM_RUN)
        kernels.append(ks)
    return kernels


def probe(ks: KernelSession) -> dict[str, Any]:
    ks.kc.execute("print('PROBE', __import__('json').dumps(_panel_probe()))")
    deadline = time.time() + 30
    while time.time() < deadline:
        msg = ks.kc.get_iopub_msg(timeout=30)
        text = msg["content"].get("text", "") if msg["msg_type"] == "stream" else ""
        if text.startswith("PROBE "):
            return json.loads(text.split(" ", 1)[1])
    raise TimeoutError("the kernel did not answer the probe")


def kernel_cpu(kernels: list[KernelSession]) -> float:
    import psutil

    return sum(sum(psutil.Process(ks.km.provisioner.process.pid).cpu_times()[:2])  # type: ignore[union-attr]
               for ks in kernels)


class Traffic:
    """Every request of the panel and its answer, counted by Chromium's DevTools protocol."""

    def __init__(self, page: Any) -> None:
        self.sent = self.received = self.requests = self.not_modified = 0
        self._ours: set[str] = set()
        self._page = page
        cdp = page.context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.on("Network.requestWillBeSent", self._request)
        cdp.on("Network.responseReceived", self._response)
        cdp.on("Network.loadingFinished", self._finished)

    def _request(self, ev: dict[str, Any]) -> None:
        request = ev["request"]
        if "/jupyter-torchdist/api/runs" in request["url"]:
            self._ours.add(ev["requestId"])
            self.requests += 1
            self.sent += len(request["url"]) + sum(len(k) + len(v) + 4 for k, v in request["headers"].items()) + 20

    def _response(self, ev: dict[str, Any]) -> None:
        if ev["requestId"] in self._ours and ev["response"]["status"] == 304:
            self.not_modified += 1

    def _finished(self, ev: dict[str, Any]) -> None:
        if ev["requestId"] in self._ours:
            self.received += int(ev.get("encodedDataLength") or 0)

    def wait(self, seconds: float) -> None:
        """Let time pass with the browser's events delivered as they come (Playwright's sync API delivers them
        only while one of its calls runs)."""
        self._page.wait_for_timeout(seconds * 1000)

    def snapshot(self) -> tuple[int, int, int, int]:
        return self.sent, self.received, self.requests, self.not_modified


def open_panel(lab: Lab, expect: int) -> Traffic:
    lab.start_browser()
    traffic = Traffic(lab.page)
    lab.page.goto(f"{lab.base}/lab?token={lab.token}", wait_until="domcontentloaded", timeout=120_000)
    lab.page.wait_for_function("() => !!(window.jupyterapp && window.jupyterapp.commands"
                               " .hasCommand('jupyter-torchdist:show-runs'))", timeout=120_000)
    lab.page.evaluate("async () => { await window.jupyterapp.restored;"
                      " await window.jupyterapp.commands.execute('jupyter-torchdist:show-runs'); }")
    lab.page.wait_for_function(
        f"() => document.querySelectorAll('#jupyter-torchdist-runs .jp-TorchDist-runs-row').length >= {expect}",
        timeout=120_000)
    return traffic


def set_publishers(kernels: list[KernelSession], on: bool) -> None:
    cell = ("from jupyter_torchdist.panel import publisher as _pub\n"
            + ("_pub.start(get_ipython())" if on else "_pub.stop(get_ipython())"))
    for ks in kernels:
        ks.run(cell)


def window(kernels: list[KernelSession], traffic: Traffic, seconds: float, on: bool) -> dict[str, Any]:
    """One phase: the kernels' CPU, the publishers' own (when on) and the panel's traffic over ``seconds``."""
    before = [probe(ks) for ks in kernels] if on else []
    traffic.wait(0.5)   # events so far counted before the window opens
    cpu0, t0, net0 = kernel_cpu(kernels), time.monotonic(), traffic.snapshot()
    traffic.wait(seconds)
    cpu1, t1, net1 = kernel_cpu(kernels), time.monotonic(), traffic.snapshot()
    after = [probe(ks) for ks in kernels] if on else []
    wall = t1 - t0
    out = {"on": on, "seconds": wall, "kernels_cores": (cpu1 - cpu0) / wall}
    if on:
        out["publishers_cores"] = sum(a["cpu"] - b["cpu"] for a, b in zip(after, before)) / wall
        out["writes_per_s"] = sum(a["writes"] - b["writes"] for a, b in zip(after, before)) / wall / len(kernels)
        sent, got, requests, cached = (n1 - n0 for n1, n0 in zip(net1, net0))
        out.update({"panel_kbs": (sent + got) / wall / 1000, "polls_per_s": requests / wall,
                    "not_modified": cached, "requests": requests})
    return out


def quiet_traffic(kernels: list[KernelSession], traffic: Traffic, seconds: float) -> dict[str, Any]:
    """Every run stopped: the list stops changing, and what the panel costs then."""
    for ks in kernels:
        ks.run("import jupyter_torchdist as _jt\nfor _r in _jt.runs():\n    _r.stop()\nfor _r in _jt.runs():\n"
               "    _r.wait(30)")
    traffic.wait(3)
    net0, t0 = traffic.snapshot(), time.monotonic()
    traffic.wait(seconds)
    sent, got, requests, cached = (n1 - n0 for n1, n0 in zip(traffic.snapshot(), net0))
    wall = time.monotonic() - t0
    return {"panel_kbs": (sent + got) / wall / 1000, "requests": requests, "not_modified": cached}


def report(phases: list[dict[str, Any]], quiet: dict[str, Any]) -> dict[str, Any]:
    on = [p for p in phases if p["on"]]
    off = [p for p in phases if not p["on"]]
    rows = [[i + 1, "on" if p["on"] else "off", f"{p['kernels_cores']:.3f}",
             f"{p['publishers_cores']:.4f}" if p["on"] else "-", f"{p['writes_per_s']:.2f}" if p["on"] else "-",
             f"{p['panel_kbs']:.2f}" if p["on"] else "-", f"{p['requests']} ({p['not_modified']} x 304)"
             if p["on"] else "-"] for i, p in enumerate(phases)]
    print(common.table(["phase", "publishers", "5 kernels' CPU (cores)", "publishers' CPU (cores)",
                        "writes/s per kernel", "panel KB/s", "panel requests"], rows))
    values = {"panel_kbs": common.median([p["panel_kbs"] for p in on]),
              "publishers_cores": common.median([p["publishers_cores"] for p in on]),
              "added_cores_ab": common.median([p["kernels_cores"] for p in on])
              - common.median([p["kernels_cores"] for p in off]),
              "writes_per_s": common.median([p["writes_per_s"] for p in on]),
              "quiet_panel_kbs": quiet["panel_kbs"]}
    print(f"all runs ended, nothing changing: panel {quiet['panel_kbs']:.3f} KB/s, {quiet['requests']} requests "
          f"({quiet['not_modified']} answered 304)")
    common.print_targets(values, TARGETS)
    return values


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin(f"bench_runs_panel: {KERNELS} kernels x {RUNS_PER_KERNEL} runs = "
                        f"{KERNELS * RUNS_PER_KERNEL} runs listed, each rank reporting every {args.every:g} s; "
                        f"{args.rounds} rounds of {args.window:g} s with the publishers on, then off")
    lab = Lab(Path(tempfile.mkdtemp(prefix="bench-runs-panel-")))
    kernels: list[KernelSession] = []
    try:
        lab.start_server()
        kernels = start_kernels(lab.tmp / "runtime", args.every)
        traffic = open_panel(lab, KERNELS * RUNS_PER_KERNEL)
        phases = []
        for r in range(args.rounds):
            for on in common.rotated([True, False], r):
                set_publishers(kernels, on)
                time.sleep(2)
                phases.append(window(kernels, traffic, args.window, on))
        set_publishers(kernels, True)
        quiet = quiet_traffic(kernels, traffic, 20.0)
        values = report(phases, quiet)
    finally:
        for ks in kernels:
            ks.close()
        lab.stop()
    common.finish("bench_runs_panel", {"machine": info, "args": vars(args), "kernels": KERNELS,
                                       "runs_per_kernel": RUNS_PER_KERNEL, "phases": phases, "quiet": quiet, **values},
                  started, values)


if __name__ == "__main__":
    main()
