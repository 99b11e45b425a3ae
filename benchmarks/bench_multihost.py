"""Issue 21's benchmark row: the same jobs on two hosts and on one, side by side in one run.

    sudo python benchmarks/bench_multihost.py [--rounds 2] [--reruns 5] [--steps 300]

Hosts are network namespaces on a bridge (tests/support/hosts.py: their own addresses, hostnames and Spark
workers; root only), the master and a real notebook kernel on the bridge address. Two clusters, built one after
the other and alternating each round (the bridge and names are shared): **two hosts** of one core each (the two
ranks are necessarily on different hosts) and **one host** of two cores (both ranks on it). On each, after a first
run: the trivial 2-rank DDP job's rerun (cell start to value, median of ``--reruns``), and a DDP loop's steps/s (a
small MLP, gloo, timed after 30 warm-up steps; ``--threads 1``: the namespaces share this machine's 2 cores while
each thinks it has both, so a rank alone on its "host" would take 2 torch threads and contend with the other),
with the time of one all_reduce of its gradients alone (the link's cost: a veth pair and a bridge in this
machine's kernel, not a real network). Says SKIPPED where namespaces cannot be made.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import common

TRIVIAL = ("%%distribute -n 2 --all-ranks\nimport socket, torch, torch.distributed as dist\nt = torch.ones(1)\n"
           "dist.all_reduce(t)\nsocket.gethostname()")
TRAIN = """\
%%distribute -n 2 --threads 1
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
for step in range({total}):
    if step == 30:
        dist.barrier(); began = time.perf_counter()
    opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
rate = {steps} / (time.perf_counter() - began)
grads = torch.zeros(sum(p.numel() for p in model.parameters()))  # the step's gradients, one all_reduce
dist.barrier(); began = time.perf_counter()
for _ in range(200):
    dist.all_reduce(grads)
(rate, (time.perf_counter() - began) / 200 * 1e3)
"""


def parse_args() -> Any:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reruns", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300, help="timed DDP steps per measurement")
    return ap.parse_args()


def _value(kernel: Any, code: str) -> tuple[float, str]:
    r = kernel.execute(code, timeout=300)
    if r["status"] != "ok":
        raise RuntimeError(kernel.text(r))
    return r["seconds"], [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"][-1]


def measure(layout: str, args: Any, workdir: Path) -> dict[str, Any]:
    """Build the cluster (``two hosts`` or ``one host``), run the jobs in a fresh kernel, tear it down."""
    from tests.support.cluster import kernel_on
    from tests.support.hosts import BRIDGE_IP, build, teardown

    hosts, cores = (2, 1) if layout == "two hosts" else (1, 2)
    made = build(workdir, hosts=hosts, cores=cores)
    kernel = None
    try:
        conf = {"spark.driver.host": BRIDGE_IP, "spark.driver.bindAddress": BRIDGE_IP, "spark.executor.cores": "1"}
        kernel = kernel_on(made.cluster, conf, env={"SPARK_LOCAL_IP": BRIDGE_IP})
        kernel.execute("import time as _t\nwhile executors() < 2: _t.sleep(0.2)", timeout=120)
        first, where = _value(kernel, TRIVIAL)
        reruns = [_value(kernel, TRIVIAL)[0] for _ in range(args.reruns)]
        rate, reduce_ms = eval(_value(kernel, TRAIN.format(total=30 + args.steps, steps=args.steps))[1])
        out = {"first_s": first, "rerun_s": common.median(reruns), "reruns": reruns, "steps_s": rate,
               "allreduce_ms": reduce_ms, "hosts_of_ranks": where}
        print(f"  {layout}: first {first:.2f} s, rerun {out['rerun_s']:.2f} s, {rate:.1f} steps/s, the gradients' "
              f"all_reduce alone {reduce_ms:.2f} ms, ranks on {where}", flush=True)
        return out
    finally:
        if kernel is not None:
            kernel.shutdown()
        teardown(made)


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_multihost: the same jobs on two hosts (network namespaces) and on one")
    from tests.support.hosts import bench_available

    why = bench_available()
    if why is not None:
        print(f"SKIPPED: the multi-host bench cannot run here: {why}")
        return
    layouts = ["two hosts", "one host"]
    results: dict[str, list[dict[str, Any]]] = {layout: [] for layout in layouts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, layout in enumerate(common.rotated(layouts, r)):
                results[layout].append(measure(layout, args, Path(tmp) / f"r{r}-{i}"))
    keys = ("first_s", "rerun_s", "steps_s", "allreduce_ms")
    med = {layout: {key: common.median([m[key] for m in runs]) for key in keys} for layout, runs in results.items()}
    print()
    print(common.table(["cluster", "first run s", "rerun s (median)", "DDP steps/s", "rounds' steps/s",
                        "gradients' all_reduce alone, ms"],
                       [[layout, f"{med[layout]['first_s']:.2f}", f"{med[layout]['rerun_s']:.2f}",
                         f"{med[layout]['steps_s']:.1f}", common.fmt_list(m["steps_s"] for m in results[layout]),
                         f"{med[layout]['allreduce_ms']:.2f}"] for layout in layouts]))
    kv = {"two_hosts_rerun_s": med["two hosts"]["rerun_s"], "one_host_rerun_s": med["one host"]["rerun_s"],
          "two_hosts_steps_s": med["two hosts"]["steps_s"], "one_host_steps_s": med["one host"]["steps_s"],
          "steps_ratio": med["two hosts"]["steps_s"] / med["one host"]["steps_s"],
          "rerun_ratio": med["two hosts"]["rerun_s"] / med["one host"]["rerun_s"]}
    common.finish("bench_multihost", {"machine": info, "results": results, "kv": kv}, started, kv)


if __name__ == "__main__":
    main()
