"""Issues 45 and 51: what tracking and profiling cost a run, each tracker side by side in one run.

    python benchmarks/bench_tracking.py [--rounds 9] [--steps 800] [--width 512]

One 2-rank DDP training loop (local processes, gloo; an MLP of ``--width`` on synthetic data, the same work in each
of ``--steps`` steps, ``report(step=..., loss=..., acc=...)`` every step), run untracked, with ``--track mlflow``
against a real ``mlflow server`` (SQLite store, on loopback), ``--track tensorboard``, ``--track wandb`` (W&B's
offline mode: its own client and service, writing its run files), all three at once, and with ``--profile`` (its
default window), in rotated order for ``--rounds`` rounds. Wall time is the run's, from the call to its value.

Targets: each tracker's run's median wall time within 2% of the untracked one's (ratio <= 1.02, per tracker; all
three at once is reported beside them); every step of the loss on the MLflow server. The profiled run's cost is
reported (only its window is profiled).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

import jupyter_torchdist as jt

common.register_by_value(sys.modules[__name__])


def train(steps: int = 400, width: int = 512) -> float:
    """A small DDP loop: the same work every step (a 3-layer MLP of ``width``, a batch of 128), so whatever tracking
    costs the ranks shows in the run's wall time."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import jupyter_torchdist as jt

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                    torch.nn.ReLU(), torch.nn.Linear(width, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, width), torch.randint(0, 10, (128,))
    for step in range(steps):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (out.argmax(1) == y).float().mean()
        jt.report(step=step, total=steps, loss=loss, acc=acc)
    return float(loss)


def _server(folder: str) -> tuple[subprocess.Popen[bytes], str]:
    port = common.free_port()
    uri = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "mlflow"), "server", "--backend-store-uri",
                             f"sqlite:///{folder}/mlflow.db", "--artifacts-destination", f"{folder}/artifacts",
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(300):
        try:
            urllib.request.urlopen(uri + "/health", timeout=1).read()
            return proc, uri
        except OSError:
            time.sleep(0.3)
    raise RuntimeError("mlflow server did not start")


KINDS: dict[str, dict[str, Any]] = {
    "untracked": {}, "mlflow": {"track": "mlflow", "experiment": "bench"}, "tensorboard": {"track": "tensorboard"},
    "wandb": {"track": "wandb", "experiment": "bench"},
    "all three": {"track": "mlflow,tensorboard,wandb", "experiment": "bench-all"}, "profiled": {"profile": True}}
TRACKED = ("mlflow", "tensorboard", "wandb", "all three")


def measure(args: Any, uri: str, folder: str) -> tuple[dict[str, list[float]], bool]:
    """Every kind once a round, in rotated order; then whether every step of every tracked run is on the server."""
    seconds: dict[str, list[float]] = {k: [] for k in KINDS}
    # warm: the local process server, torch, and the kernel's MLflow and TensorBoard writers imported (once a kernel:
    # reported on its own below)
    jt.run(train, n=2, local=True, steps=10)
    first = common.timed(lambda: jt.run(train, n=2, local=True, steps=10, track="mlflow,tensorboard,wandb",
                                        experiment="bench-warm-up", logdir=os.path.join(folder, "runs")))[0]
    print(f"first tracked run of the kernel (10 steps; imports MLflow, TensorBoard and W&B): {first:.2f} s",
          flush=True)
    for r in range(args.rounds):
        for kind in common.rotated(list(KINDS), r):
            files = "tensorboard" in KINDS[kind].get("track", "") or "profile" in KINDS[kind]
            extra = dict(KINDS[kind], **({"logdir": os.path.join(folder, "runs")} if files else {}))
            wall, _ = common.timed(lambda: jt.run(train, n=2, local=True, steps=args.steps, width=args.width,
                                                  **extra))  # noqa: B023 (called at once)
            seconds[kind].append(wall)
            print(f"round {r} {kind}: {wall:.2f} s", flush=True)
    flushed = jt.flush_tracking(120)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = [r for name in ("bench", "bench-all")
            for r in client.search_runs([client.get_experiment_by_name(name).experiment_id])]
    complete = all(len(client.get_metric_history(run.info.run_id, "loss")) == args.steps for run in runs)
    return seconds, flushed and complete and len(runs) == 2 * args.rounds


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--width", type=int, default=512)
    args = ap.parse_args()
    info = common.begin("Tracking and profiling overhead, per tracker (issues 45, 51)")
    started = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="jtd-bench-tracking-")
    proc, uri = _server(folder)
    os.environ.update(MLFLOW_TRACKING_URI=uri, XDG_CACHE_HOME=os.path.join(folder, "cache"), WANDB_MODE="offline",
                      WANDB_DIR=folder, WANDB_SILENT="true")
    try:
        seconds, complete = measure(args, uri, folder)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
        shutil.rmtree(folder, ignore_errors=True)
    med = {k: common.median(v) for k, v in seconds.items()}
    print(common.table(["", "wall s per round", "median"],
                       [[k, common.fmt_list(v), common.fmt_s(med[k])] for k, v in seconds.items()]))
    values: dict[str, Any] = {f"{k.replace(' ', '_')}_over_untracked": round(med[k] / med["untracked"], 4)
                              for k in (*TRACKED, "profiled")}
    values["every_step_on_server"] = complete
    # the target is each tracker's; all three at once is reported beside them
    common.check_targets(values, [(f"{k}_over_untracked", 1.02, False) for k in TRACKED if k != "all three"])
    print(f"target every step of every tracked run on the server: {'MET' if complete else 'MISSED'}")
    common.finish("bench_tracking", {"machine": info, "args": vars(args), "seconds": seconds, "median": med},
                  started, values)


if __name__ == "__main__":
    main()
