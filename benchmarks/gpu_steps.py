"""The steps of benchmarks/gpu_check.py: each a function of its time limit returning (passed, what it saw), run in
one real kernel (``Notebook``: a cell past its limit restarts the kernel, so the next step starts clean)."""
from __future__ import annotations

import ast
import glob
import gzip
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Callable

import common

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

SETUP = f"""\
%load_ext jupyter_torchdist
import sys, cloudpickle
sys.path.insert(0, {HERE!r})
import gpu_jobs, gpu_path_jobs
cloudpickle.register_pickle_by_value(gpu_jobs)
cloudpickle.register_pickle_by_value(gpu_path_jobs)
import jupyter_torchdist as jt
"""


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    return {"JUPYTER_TORCHDIST_WARMUP": "0", "PYTHONPATH": path}


class Notebook:
    """One kernel with the extension loaded; a cell past its limit takes the kernel (and its ranks) down with it, and
    the next cell gets a fresh one."""

    def __init__(self, gpu: bool) -> None:
        self.flag = "--gpu" if gpu else ""
        self.gpu = gpu
        self._ks: common.KernelSession | None = None

    def _session(self) -> common.KernelSession:
        if self._ks is None:
            self._ks = common.KernelSession(env=_env())
            self._ks.run(SETUP, timeout=120)
        return self._ks

    def value(self, code: str, timeout: float) -> Any:
        ks = self._session()
        try:
            return ast.literal_eval(ks.run(code, timeout=timeout)["result"])
        except TimeoutError:
            self.close()
            raise

    def close(self) -> None:
        if self._ks is not None:
            ks, self._ks = self._ks, None
            ks.close(wait_s=30)


def _python(code: str, timeout: float, args: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_env()}
    return subprocess.run([sys.executable, *(args or ["-c", code])], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL)


def same_device(name: str, expect: str) -> bool:
    """``cpu:0`` is ``cpu``; ``cuda`` alone is not ``cuda:0`` (it means the current device, whichever)."""
    return name.removesuffix(":0") == expect.removesuffix(":0") if expect.startswith("cpu") else name == expect


# -- the steps -------------------------------------------------------------------------------------------------------
def allreduce(nb: Notebook) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        v = nb.value(f"%%distribute -n 1 {nb.flag} --local -q\ngpu_jobs.nccl_allreduce()", limit)
        want = ("nccl", "cuda:0") if nb.gpu else ("gloo", "cpu")
        return v["sum"] == 1.0 and (v["backend"], v["device"]) == want, str(v)
    return go


def backends(nb: Notebook) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        v = nb.value(f"%%distribute -n 1 {nb.flag} --local -q\ngpu_path_jobs.backends()", limit)
        sums = v["cpu_sum"] == 1.0 and v["device_sum"] == 1.0 and v["objects"] == [{"rank": 0}]
        if not nb.gpu:
            return sums and v["backend"] == "gloo", str(v)
        return sums and v["backend"] == "nccl" and "cpu:gloo" in v["config"] and "cuda:nccl" in v["config"] \
            and v["device"] == "cuda:0" and v["order"] == "PCI_BUS_ID", str(v)
    return go


def horovod(nb: Notebook) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        v = nb.value(f"%%distribute -n 1 {nb.flag} --local -q\ngpu_path_jobs.horovod_mixed()", limit)
        where = "cuda:0" if nb.gpu else "cpu"
        ok = v["average"] == 1.0 and v["device_sum"] == 1.0 and v["gathered"] == [0.0] and v["broadcast"] == 7.0
        return ok and same_device(v["device"], where) and same_device(v["gathered_device"], where), str(v)
    return go


def distributor(nb: Notebook, local_mode: bool) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        v = nb.value("from jupyter_torchdist import TorchDistributor\nTorchDistributor(num_processes=1, "
                     f"local_mode={local_mode}, use_gpu={nb.gpu}).run(gpu_path_jobs.distributor_layout)", limit)
        layout = v["local_rank"] == 0 and v["node_rank"] == 0 and (not nb.gpu or len(v["visible"].split(",")) == 1)
        return v["sum"] == 1.0 and layout, str(v)
    return go


def profile(nb: Notebook) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        logdir = tempfile.mkdtemp(prefix="gpu-check-profile-")
        try:
            nb.value(f"%%distribute -n 1 {nb.flag} --local -q --profile 3:6 --logdir {logdir}\n"
                     "gpu_path_jobs.profiled_loop(8)", limit)
            traces = glob.glob(os.path.join(logdir, "**", "rank-0.pt.trace.json.gz"), recursive=True)
            if not traces:
                return False, f"no trace under {logdir}"
            with gzip.open(traces[0], "rt") as f:
                events = json.load(f).get("traceEvents", [])
            kinds = sorted({str(e.get("cat")) for e in events if isinstance(e, dict) and e.get("cat")})
            kernels = sum(1 for e in events if isinstance(e, dict) and e.get("cat") == "kernel")
            steps = sum(1 for e in events if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep"))
            return steps >= 3 and (kernels > 0 or not nb.gpu), f"{steps} steps, {kernels} CUDA kernels; {kinds}"
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
    return go


def plain_resnet(gpu: bool, steps: int, warmup: int, batch: int, timeout: float) -> float:
    code = (f"import json, sys; sys.path.insert(0, {HERE!r}); import gpu_jobs; "
            f"print('RESULT', json.dumps(gpu_jobs.plain_resnet({steps}, {warmup}, {batch}, {gpu!r})))")
    done = _python(code, timeout)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"plain process failed: {done.stderr[-1500:]}")
    return float(json.loads(lines[0][len("RESULT "):])["steps_per_s"])


def resnet(nb: Notebook, rows: list[dict[str, Any]]) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        steps, warmup, batch = (60, 15, 128) if nb.gpu else (4, 1, 16)
        ours: list[float] = []
        plain: list[float] = []
        cell = f"%%distribute -n 1 {nb.flag} --local -q\ngpu_jobs.resnet_steps({steps}, {warmup}, {batch})"
        for r in range(3):
            for who in (("ours", "plain") if r % 2 == 0 else ("plain", "ours")):
                if who == "ours":
                    ours.append(nb.value(cell, limit / 4)["steps_per_s"])
                else:
                    plain.append(plain_resnet(nb.gpu, steps, warmup, batch, limit / 4))
        ratio = statistics.median(ours) / statistics.median(plain)
        rows.append({"ours": ours, "plain": plain, "ratio": ratio})
        return ratio >= 0.97 or not nb.gpu, (f"ours {common.fmt_list(ours)} steps/s, plain {common.fmt_list(plain)}; "
                                             f"ratio {ratio:.3f} (target >= 0.97)")
    return go


def fit(nb: Notebook, job: str) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        v = nb.value(f"%%distribute -n 1 {nb.flag} --local -q\n{job}()", limit)
        expect = "cuda:0" if nb.gpu else "cpu"
        dev = same_device(v["device"], expect) and same_device(v.get("model_device", expect), expect)
        learned = v.get("last_loss", 0.0) < v.get("first_loss", 1.0) or v.get("steps", 0) > 0
        return dev and learned, str(v)
    return go


def cli_horovod(nb: Notebook) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        checkpoint = os.path.join(tempfile.mkdtemp(prefix="gpu-check-hvd-"), "horovod_check.pt")
        args = ["-m", "jupyter_torchdist", "-n", "1", "--local", *([nb.flag] if nb.gpu else []),
                os.path.join(REPO, "examples", "horovod_train.py"), "--epochs", "1", "--train-size", "1024",
                "--checkpoint", checkpoint]
        done = _python("", limit, args)
        said = ([ln for ln in done.stdout.splitlines() if "test loss" in ln]
                or (done.stdout + done.stderr).splitlines()[-3:])
        return done.returncode == 0 and "test loss" in done.stdout, " | ".join(said)[-400:]
    return go


def several_gpus(nb: Notebook, n: int) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        ranks = nb.value(f"%%distribute -n {n} --gpu --local -q --all-ranks\ngpu_jobs.local_rank_tutorial()", limit)
        return len({r["uuid"] for r in ranks}) == n and all(r["sum"] == n for r in ranks), str(ranks)
    return go


def spawned_after_cuda(nb: Notebook) -> Callable[[float], tuple[bool, str]]:
    """A Spark task initialises CUDA in its Python worker (a GPU UDF's way); the next run's rank on that worker is
    spawned, not forked, and uses the GPU."""
    def go(limit: float) -> tuple[bool, str]:
        touched = nb.value("import time\nsc = jt.spark_session().sparkContext\nn = sc.defaultParallelism\n"
                           "sc.parallelize(range(n), n).map(lambda _: (time.sleep(1), __import__('torch').cuda.init(), "
                           "__import__('torch').cuda.is_initialized())[-1]).collect()", limit / 2)
        v = nb.value(f"%%distribute -n 1 {nb.flag} -q\ngpu_jobs.nccl_allreduce()", limit / 2)
        return all(touched) and v["sum"] == 1.0, f"the workers touched CUDA: {touched}; then {v}"
    return go


def spark_here() -> str | None:
    """Why the Spark steps cannot run here (None when they can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed here"
    return None if shutil.which("java") else "no Java here"


def run_all(check: Any, nb: Notebook, devices: list[str]) -> None:
    """Every step, in order; the cheap ones first, so that a machine lent briefly shows the most."""
    resnet_rows: list[dict[str, Any]] = []
    check.step("all_reduce on the rank's GPU, value back", allreduce(nb))
    check.step("default group: nccl by name, gloo for CPU tensors, PCI bus order", backends(nb))
    check.step("Horovod: metric_average on a CPU tensor beside CUDA tensors", horovod(nb))
    check.step("TorchDistributor(local_mode=True, use_gpu=True): pyspark's layout", distributor(nb, True))
    check.step("--profile: CUDA kernels in the rank's trace", profile(nb))
    check.step("DDP tutorial loop, small ResNet: ours / plain process", resnet(nb, resnet_rows), limit=150)
    check.step("Lightning Trainer(accelerator='gpu') in %%distribute", fit(nb, "gpu_jobs.lightning_fit"))
    check.step("Hugging Face Trainer in %%distribute", fit(nb, "gpu_jobs.transformers_fit"))
    if importlib.util.find_spec("deepspeed") is not None:
        check.step("DeepSpeed ZeRO-2 on the rank's GPU", fit(nb, "gpu_path_jobs.deepspeed_fit"))
    else:
        check.skip("DeepSpeed ZeRO-2 on the rank's GPU", "deepspeed is not installed here")
    check.step("examples/horovod_train.py --gpu from the command line", cli_horovod(nb))
    if nb.gpu and len(devices) >= 2:
        check.step(f"{len(devices)} ranks, torch.cuda.set_device(LOCAL_RANK) on each", several_gpus(nb, len(devices)))
    else:
        check.skip("ranks on several GPUs of one host", f"{len(devices)} GPU(s) here")
    why = spark_here()
    for name, step in (("all_reduce on the embedded Spark session", allreduce_spark(nb)),
                       ("TorchDistributor(local_mode=False) on the embedded session", distributor(nb, False)),
                       ("a run after a Spark task initialised CUDA in its worker", spawned_after_cuda(nb))):
        if why is None and (nb.gpu or "CUDA" not in name):
            check.step(name, step)
        else:
            check.skip(name, why or "needs a GPU")


def allreduce_spark(nb: Notebook) -> Callable[[float], tuple[bool, str]]:
    def go(limit: float) -> tuple[bool, str]:
        v = nb.value(f"%%distribute -n 1 {nb.flag} -q\ngpu_jobs.nccl_allreduce()", limit)
        return v["sum"] == 1.0, str(v)
    return go
