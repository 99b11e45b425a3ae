"""The Spark Connect backend: N barrier tasks of a DataFrame operation, for a notebook whose session is a Connect
client (Databricks serverless and Connect, Spark 4's thin client). ``sparkContext`` is never touched.

The ranks run exactly as on a classic session (``rank.agent`` in each barrier task, rendezvous and results
through the kernel's channel); only the launch differs: ``spark.range(n, numPartitions=n).mapInArrow(task,
barrier=True)``, tagged so that a cancel interrupts this operation and no other of the user's.
"""
from __future__ import annotations

import functools
import json
import os
import pickle
import queue
import secrets
import socket
from dataclasses import replace
from typing import Any, Final
from urllib.parse import urlparse

from ..core import contract as C
from ..channel.tls import plaintext_warning, tls_requested
from ..core.contract import Inbound, LaunchInfo, RunPlan
from ..core.errors import LaunchError
from ..core.gpus import gpus_per_task, task_ranks
from . import gpu_preflight
from ..core.options import RunOptions
from .base import Capacity, Launcher
from .spark_jobs import error_summary, held_slots, hold, release, submit_job
from .session.tls_consent import require_ssl_consent, session_conf
from .session.embedded import local_slots
from .session.notebook import connect_session

__all__ = ["ConnectLauncher", "connect_session", "connect_conf", "CHANNEL_HOST_CONF", "CHANNEL_HOST_ENV",
           "CHANNEL_ADVERTISE_CONF", "CHANNEL_ADVERTISE_ENV", "PROBE_S"]

CHANNEL_HOST_CONF: Final = "spark.jupyter_torchdist.channel.host"
CHANNEL_HOST_ENV: Final = "JUPYTER_TORCHDIST_CHANNEL_HOST"
CHANNEL_ADVERTISE_CONF: Final = "spark.jupyter_torchdist.channel.advertise"
CHANNEL_ADVERTISE_ENV: Final = "JUPYTER_TORCHDIST_CHANNEL_ADVERTISE"
PROBE_S: Final = 3.0  # how long a task tries to reach the kernel's channel before the run goes offline
_END_SCHEMA: Final = "rank long, code long, signal string, stopped boolean, mode string, events binary"
_LOOPBACK: Final = ("localhost", "127.0.0.1", "::1", "")
_reachable: dict[tuple[str, ...], bool] = {}  # (server, channel address) -> the executors reached the kernel
OFFLINE = ("live progress is unavailable: the executors could not reach this kernel at {address}, so the value, "
           "each rank's end, its traceback and the tail of its log came back when the run ended. Set "
           f"{CHANNEL_HOST_CONF} (or {CHANNEL_ADVERTISE_CONF} when the executors must dial another address, behind "
           "NAT or a proxy) to an address of this machine they can reach for the live view, Stop and kept ranks.")


def _reaches(address: tuple[str, int], timeout: float) -> bool:
    try:
        socket.create_connection(address, timeout=timeout).close()
        return True
    except OSError:
        return False


def _offline(ctx: Any, plan: RunPlan) -> bool:
    """Whether this run goes offline: it was known to, or some task cannot reach the channel (all agree)."""
    if plan.offline or plan.probe_s is None:
        return plan.offline
    ok = _reaches(plan.address, plan.probe_s)
    return "0" in ctx.allGather("1" if ok else "0")


def _relayed(ctx: Any, plan: RunPlan, rank: int) -> tuple[RunPlan, Any]:
    """Rank 0's task opens the relay; every task learns where it listens. The plan the agents then use."""
    from .relay import Relay

    if plan.keep:
        raise RuntimeError("kept ranks need the live channel, and the executors cannot reach this kernel at "
                           f"{plan.address[0]}:{plan.address[1]}: set {CHANNEL_HOST_CONF} (or "
                           f"{CHANNEL_ADVERTISE_CONF}) to an address of the notebook's machine they can reach")
    relay = None
    if rank == 0:
        host = ctx.getTaskInfos()[0].address.rsplit(":", 1)[0]
        relay = Relay(replace(plan, tls=None), host)
        relay.start()
    where = json.loads(ctx.allGather(json.dumps(list(relay.address) if relay else None))[0])
    return replace(plan, address=(str(where[0]), int(where[1])), tls=None, probe_s=None, offline=True), relay


def _rank_task(plan: RunPlan, local_gpus: list[str] | None, per_task: int, batches: Any) -> Any:
    """One barrier task: its ranks from the partition id (one, or one per GPU of the task). Forks each rank and
    watches it (``rank.agent``); a row per rank: its end (and, from rank 0's task of an offline run, what the relay
    recorded)."""
    import pyarrow as pa
    from pyspark import BarrierTaskContext

    from jupyter_torchdist.rank.agent import run_agents

    for _ in batches:
        pass  # the partition's one row says nothing: the partition id says the ranks
    ctx = BarrierTaskContext.get()
    placed = task_ranks(ctx, per_task, plan, local_gpus)
    offline = _offline(ctx, plan)
    relay = None
    if offline:
        plan, relay = _relayed(ctx, plan, placed[0][0])
    ends = run_agents(plan, placed)
    events = pickle.dumps(relay.finish()) if relay is not None else None
    yield pa.RecordBatch.from_pylist([{"rank": rank, "code": end.get("code"), "signal": end.get("signal"),
                                       "stopped": bool(end.get("stopped")), "mode": "offline" if offline else "online",
                                       "events": events if i == 0 else None}
                                      for i, ((rank, _), end) in enumerate(zip(placed, ends))])


def _check_server(spark: Any, local: bool) -> None:
    """What a Connect server must offer for barrier ranks, said before anything is submitted."""
    try:
        version = tuple(int(p) for p in str(spark.version).split(".")[:2])
    except Exception:
        version = ()  # a server that does not say: let it try
    if version and version < (3, 5):
        raise LaunchError(f"this Spark Connect server runs Spark {spark.version}: ranks are barrier tasks of a "
                          "mapInArrow operation, which needs Spark 3.5 or newer on the server (4.0+ recommended). "
                          "Use a newer server (Databricks Runtime 14+), or a classic SparkSession.")
    if not local and (connect_conf(spark, "spark.dynamicAllocation.enabled") or "").lower() == "true":
        raise LaunchError("barrier tasks cannot run with dynamic allocation on a cluster (Spark refuses it, "
                          "SPARK-24942): the server needs spark.dynamicAllocation.enabled=false, or a fixed-size "
                          "cluster.")


def _advertised(spark: Any) -> tuple[str, int | None] | None:
    """The address ranks dial when it is not where the kernel listens: "host" or "host:port"."""
    text = os.environ.get(CHANNEL_ADVERTISE_ENV, "").strip() or (connect_conf(spark, CHANNEL_ADVERTISE_CONF) or "")
    text = text.strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit() and "]" not in port:
        return host.strip("[]"), int(port)
    return text.strip("[]"), None


def connect_conf(spark: Any, key: str) -> str | None:
    """A setting of the Connect session, or None (unset, or the server will not say)."""
    try:
        value = spark.conf.get(key, None)
    except Exception:
        return None
    return None if value is None else str(value)


def _server_host(spark: Any) -> str:
    try:
        return urlparse(spark.client._builder.url.geturl()).hostname or ""
    except Exception:
        return ""


def _route_to(host: str) -> str:
    """This machine's address on the way to ``host`` (a UDP socket's local end: nothing is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 15002))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def channel_host(spark: Any, server: str, local_master: bool) -> str:
    """Where the ranks dial the kernel: the setting, else loopback for a server on this machine running a local
    master, else this machine's address on the route to the server."""
    chosen = os.environ.get(CHANNEL_HOST_ENV, "").strip() or (connect_conf(spark, CHANNEL_HOST_CONF) or "").strip()
    if chosen:
        return chosen
    if server in _LOOPBACK and local_master:
        return "127.0.0.1"
    return _route_to(server) if server else socket.gethostbyname(socket.gethostname())


class ConnectLauncher(Launcher):
    """Ranks as the barrier tasks of one DataFrame operation on the notebook's Spark Connect session."""

    name = "connect"
    slot_noun = "Spark task slots"

    def __init__(self) -> None:
        self._spark: Any = None
        self._tag: str | None = None
        self._local_gpus: list[str] | None = None
        self._per_task = 1  # ranks per task: one, or one per GPU of a task that holds several
        self._master = ""
        self._key: tuple[str, ...] = ()

    def _session(self) -> Any:
        spark = connect_session()
        if spark is None:
            raise LaunchError("the notebook's Spark Connect session is gone (stopped, or made on another thread): "
                              "build it again with SparkSession.builder.remote(...).getOrCreate()")
        return spark

    def prepare(self, options: RunOptions) -> LaunchInfo:
        spark = self._spark = self._session()
        self._master = connect_conf(spark, "spark.master") or ""
        local = self._master.startswith("local")
        server = _server_host(spark)
        _check_server(spark, local)
        self._per_task = 1
        if options.gpu:
            self._check_gpus(options, spark, local)
        self._check_slots(-(-options.n // self._per_task))
        if options.gpu and not local:  # the server's executors' torch, before any rank starts
            gpu_preflight.preflight_connect(spark, -(-options.n // self._per_task))
        host, advertise = channel_host(spark, server, local), _advertised(spark)
        self._key = (server, host, repr(advertise))
        if options.keep and _reachable.get(self._key) is False:
            raise LaunchError(OFFLINE.format(address=advertise or host).replace(
                "live progress is unavailable", "kept ranks cannot run here", 1))
        tls_on = tls_requested(lambda key: connect_conf(spark, key))
        conf = session_conf(spark)
        warning = require_ssl_consent(conf, tls_on, options.ssl_switch) or plaintext_warning(conf, tls_on)
        if _reachable.get(self._key) is False:  # said before the run, since the view will stay empty until its end
            warning = OFFLINE.format(address=f"{advertise[0]}:{advertise[1] or '(the channel port)'}" if advertise
                                     else host)
        return LaunchInfo(label=f"spark connect {server or '?'}" + (f" ({self._master})" if self._master else ""),
                          channel_host=host, loopback=host == "127.0.0.1" and advertise is None, channel_tls=tls_on,
                          warnings=(warning,) if warning else (), watcher="the Spark task (its Python worker)",
                          lost_hint="The executor's log says why.", advertise=advertise,
                          ranks_per_task=self._per_task, inline_code=_reachable.get(self._key) is False)

    def _check_slots(self, n: int) -> None:
        slots = self.capacity().slots
        if slots is None or n <= slots:
            return
        held = held_slots()
        raise LaunchError(f"-n {n} needs {n} task slots at once, but this Spark Connect session's server "
                          f"({self._master}) has {slots}" + (f" free (kept ranks hold {held}: %distribute_stop)"
                                                             if held else "")
                          + ". Ask for fewer ranks, or start the server with more (local[N]).")

    def _check_gpus(self, options: RunOptions, spark: Any, local: bool) -> None:
        """The server's side decides, never the kernel's: on a local master the server's machine runs the ranks, so its
        torch and its GPUs (asked by a one-task job there); else the server's GPU scheduling."""
        if local:
            self._local_gpus = gpu_preflight.server_gpus(spark, options.n, self._master)
            return
        try:
            self._per_task = per_task = gpus_per_task(connect_conf(spark, "spark.task.resource.gpu.amount"))
        except LaunchError as exc:
            raise LaunchError(f"{exc} (On Spark Connect these are the server's settings.)") from None
        if options.n % per_task:
            raise LaunchError(f"--gpu: spark.task.resource.gpu.amount={per_task} on the Spark Connect server gives "
                              f"each task {per_task} GPUs and a rank on each, so -n must be a multiple of {per_task} "
                              f"(asked {options.n}).")

    def capacity(self) -> Capacity:
        spark = self._spark or self._session()
        master = self._master or connect_conf(spark, "spark.master") or ""
        slots = local_slots(master)  # a cluster behind Connect does not say: Spark's own barrier check decides
        return Capacity(slots=None if slots is None else slots - held_slots(),
                        default_ranks=int(connect_conf(spark, "spark.default.parallelism") or slots or 2),
                        where=f"this Spark Connect session ({master or 'a remote server'})")

    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        spark, key = self._spark, self._key
        tag = self._tag = f"jupyter-torchdist-{plan.run_id}-{secrets.token_hex(3)}"
        known = _reachable.get(key)
        plan = replace(plan, probe_s=PROBE_S if known is None else None, offline=known is False)
        task = functools.partial(_rank_task, plan, self._local_gpus, self._per_task)

        def job() -> None:
            error, rows = None, []
            try:
                spark.addTag(tag)  # thread-local in the Connect client: only this operation carries it
                n = -(-plan.world_size // self._per_task)  # tasks
                rows = spark.range(0, n, 1, n).mapInArrow(task, _END_SCHEMA, barrier=True).collect()
            except BaseException as exc:
                error = _describe(exc)
            finally:
                release(plan.run_id)
                try:
                    spark.removeTag(tag)
                except Exception:
                    pass
            inbox.put(Inbound(-1, C.BACKEND, _ended(rows, error, key, plan, inbox)))

        if plan.keep:
            hold(plan.run_id, -(-plan.world_size // self._per_task))
        submit_job(job, lane=f"connect-run-{plan.run_id}")  # a lane of its own: runs at once never wait

    def cancel(self) -> None:
        if self._tag is not None and self._spark is not None:
            try:
                self._spark.interruptTag(self._tag)
            except Exception:
                pass


def _ended(rows: list[Any], error: str | None, key: tuple[str, ...], plan: RunPlan,
           inbox: queue.SimpleQueue[Inbound]) -> C.JobEndMsg:
    """The job's end: an offline run's record replayed into the inbox first (the kernel folds it as if it had
    come live), and what was learnt about reaching the kernel remembered for the next run."""
    end: C.JobEndMsg = {"t": C.JOB_END, "error": error}
    if not rows:
        return end
    offline = any(row["mode"] == "offline" for row in rows)
    _reachable[key] = not offline
    for row in rows:
        for ev in pickle.loads(row["events"]) if row["events"] else ():
            inbox.put(ev)
    if offline:
        end["notice"] = OFFLINE.format(address=f"{plan.address[0]}:{plan.address[1]}")
    return end


def _describe(exc: BaseException) -> str:
    text = error_summary(exc)
    if "BarrierJobSlotsNumberCheckFailed" in text:
        return ("the Spark Connect server could not give every rank a task slot at once (barrier mode): ask for "
                f"fewer ranks, or give the server more executors or cores.\n{text}")
    return text
