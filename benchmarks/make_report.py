"""Chart and README tables from the latest results (benchmarks/results/*.json and *.txt).

    python benchmarks/make_report.py

Writes benchmarks/latency.png (latency per launcher; per rank count; per payload), benchmarks/data.png
(bench_data: steps/s, first batch, memory per mode) and replaces the
block between the RESULTS markers in benchmarks/README.md with the tables each script printed last.
matplotlib is needed here only (``pip install matplotlib``); it is not a package dependency.
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

BEGIN, END = "<!-- BEGIN RESULTS (make_report.py) -->", "<!-- END RESULTS -->"
SCRIPTS = ["bench_latency", "bench_magic", "bench_scaling", "bench_throughput", "bench_horovod", "bench_kept",
           "bench_data", "bench_connect", "bench_restarts", "bench_first_cell", "bench_late_executors",
           "bench_multihost", "bench_report", "bench_debug", "bench_gpu", "profile_phases"]
LAUNCHER_NAMES = {"accelerate notebook_launcher": "Accelerate notebook_launcher",
                  "torchrun --nproc_per_node 2": "torchrun --nproc_per_node 2",
                  "TorchDistributor local_mode=True": "TorchDistributor(local_mode=True)",
                  "TorchDistributor local_mode=False": "TorchDistributor(local_mode=False)"}


def load(name: str) -> dict[str, Any] | None:
    path = os.path.join(common.RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None (with a note) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: pip install matplotlib (benchmarks only)", file=sys.stderr)
        return None
    return plt


def launcher_bars(lat: dict[str, Any] | None, mag: dict[str, Any] | None) -> list[tuple[str, list[float], str]]:
    """(label, seconds, colour) per launcher, ours first, those with no runs left out."""
    bars: list[tuple[str, list[float], str]] = []
    if lat:
        bars.append(("ours: rerun (run())", lat["times"].get("ours rerun (API)", []), "tab:blue"))
        bars.append(("ours: first run after warm-up (run())", [lat["first_s"]], "tab:blue"))
    if mag:
        r = mag["results"]
        bars.append(("ours: %%distribute rerun (kernel)", r.get("rerun", []), "tab:cyan"))
        bars.append(("ours: first %%distribute after %load_ext", r.get("first", []), "tab:cyan"))
    if lat:
        for key, label in LAUNCHER_NAMES.items():
            xs = lat["times"].get(key) or []
            if xs:
                bars.append((label, xs, "tab:gray" if "Torch" not in label else "tab:red"))
    if mag and mag["results"].get("td_dist"):
        bars.append(("TorchDistributor(local_mode=False), in the kernel", mag["results"]["td_dist"], "tab:red"))
    if lat:
        bars.append(("ours: warm-up at %load_ext (background, once)", [lat["warmup_s"]], "lightsteelblue"))
    return [b for b in bars if b[1]]


def plot_launchers(ax: Any, bars: list[tuple[str, list[float], str]]) -> None:
    """Left: a horizontal bar per launcher (median, min-max whiskers), log scale."""
    ys = list(range(len(bars)))[::-1]
    for y, (_label, xs, color) in zip(ys, bars):
        med = common.median(xs)
        ax.barh(y, med, color=color, xerr=[[med - min(xs)], [max(xs) - med]] if len(xs) > 1 else None,
                capsize=3)
        ax.text(med * 1.08, y, f"{med:.2f} s" if med < 10 else f"{med:.1f} s", va="center", fontsize=8)
    ax.set_yticks(ys, [b[0] for b in bars], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("seconds, cell start to value back (median, min-max bars), log scale")
    ax.set_title("Trivial 2-rank DDP job: latency per launcher", fontsize=10)
    ax.set_xlim(0.1, max(common.median(b[1]) for b in bars) * 4)


def plot_ranks(ax: Any, sca: dict[str, Any] | None) -> None:
    """Middle: our rerun and first run per rank count, torchrun for reference."""
    if sca:
        ranks = sca["ranks"]
        med = [common.median(sca["by_n"][str(n)] if str(n) in sca["by_n"] else sca["by_n"][n]) for n in ranks]
        lo = [min(sca["by_n"][str(n)]) for n in ranks]
        hi = [max(sca["by_n"][str(n)]) for n in ranks]
        ax.errorbar(ranks, med, yerr=[[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]],
                    marker="o", capsize=3, label="ours, rerun (median)")
        first = [sca["first"][str(n)] for n in ranks]
        ax.plot(ranks, first, marker="x", linestyle=":", label="ours, first run at that n")
        tr = sca.get("torchrun_n") or {}
        tr_med = [common.median(tr.get(str(n), [])) for n in ranks]
        if any(x == x for x in tr_med):
            ax.plot(ranks, tr_med, marker="s", color="tab:gray", label="torchrun (reference)")
        ax.set_yscale("log")
        ax.set_xticks(ranks)
        ax.set_xlabel("ranks (local[8] session, 2 cores)")
        ax.set_ylabel("seconds (log scale)")
        ax.legend(fontsize=8)
    ax.set_title("Latency per rank count", fontsize=10)


def plot_payload(ax: Any, sca: dict[str, Any] | None) -> None:
    """Right: the median rerun per captured payload size."""
    if sca:
        labels = list(sca["by_p"])
        med = [common.median(sca["by_p"][k]) for k in labels]
        ax.bar(labels, med, color="tab:blue")
        for i, m in enumerate(med):
            ax.text(i, m, f"{m:.2f} s", ha="center", va="bottom", fontsize=8)
        ax.set_xlabel("captured tensor (n=2)")
        ax.set_ylabel("seconds (median)")
    ax.set_title("Latency per captured payload", fontsize=10)


def chart(path: str) -> bool:
    """The three panels into ``path``; False when matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return False
    lat, mag, sca = load("bench_latency"), load("bench_magic"), load("bench_scaling")
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.6), gridspec_kw={"width_ratios": [1.5, 1, 1]})
    plot_launchers(axes[0], launcher_bars(lat, mag))
    plot_ranks(axes[1], sca)
    plot_payload(axes[2], sca)
    info = (lat or mag or sca or {}).get("machine", {})
    fig.suptitle(f"jupyter-torchdist launch latency | {info.get('cpu', '?')}, {info.get('cores', '?')} cores, "
                 f"torch {info.get('torch', '?')}, pyspark {info.get('pyspark', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


MODE_COLORS = {"inline": "tab:gray", "dataloader": "tab:olive", "offloaded": "tab:blue", "ray": "tab:orange"}


def plot_modes(ax: Any, results: dict[str, list[dict[str, float]]], key: str, label: str) -> None:
    """A bar per data mode (median) with each round as a dot."""
    modes = [m for m in MODE_COLORS if results.get(m)]
    for i, mode in enumerate(modes):
        xs = [r[key] for r in results[mode]]
        med = common.median(xs)
        ax.bar(i, med, color=MODE_COLORS[mode])
        ax.plot([i] * len(xs), xs, "k.", markersize=5)
        ax.text(i, med, f"{med:.2f}" if med < 100 else f"{med:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(modes)), modes, fontsize=8)
    ax.set_ylabel(label)


def data_chart(path: str) -> bool:
    """bench_data's modes: steps/s, time to the first batch, rank peak memory; False without results."""
    plt, data = _pyplot(), load("bench_data")
    if plt is None or not data or not data.get("results"):
        return False
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.6))
    step = data["args"]["step_ms"]
    for ax, key, title in ((axes[0], "steps_per_s", "Steady steps/s (after 2 batches)"),
                           (axes[1], "epoch_steps_per_s", "Epoch steps/s (start-up included)")):
        plot_modes(ax, data["results"], key, "steps/s (median; dots: rounds)")
        ax.axhline(1000 / step, color="k", linestyle=":", linewidth=1)
        ax.set_title(f"{title}; dotted: the {step:.0f} ms step alone", fontsize=9)
    plot_modes(axes[2], data["results"], "first_batch_s", "seconds")
    axes[2].set_title("Time to the first batch", fontsize=10)
    plot_modes(axes[3], data["results"], "peak_rss_mb", "MB")
    axes[3].set_title("Rank peak RSS", fontsize=10)
    info = data.get("machine", {})
    fig.suptitle(f"bench_data: a {data['transform_s'] * 1000:.0f} ms transform per batch, 2 ranks, "
                 f"{data['args']['rows']} rows | {info.get('cores', '?')} cores, torch {info.get('torch', '?')}, "
                 f"pyspark {info.get('pyspark', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def tables_of(name: str) -> str:
    """The tables, targets and ratio line a script printed last (results/<name>.txt)."""
    path = os.path.join(common.RESULTS, f"{name}.txt")
    if not os.path.exists(path):
        return f"(no results/{name}.txt yet: run benchmarks/run_all.sh)\n"
    with open(path) as f:
        lines = f.read().splitlines()
    keep: list[str] = []
    for i, ln in enumerate(lines):
        last = i == len(lines) - 1
        if (ln.startswith(("|", "## ", "target ", "# machine", "SKIPPED")) or last
                or re.match(r"^(phases|ours, where|iopub|warm-up|session|ours:)", ln)):
            if ln.startswith("## ") or (ln and not ln.startswith("|") and keep and keep[-1].startswith("|")):
                keep.append("")
            keep.append(ln if not ln.startswith("## ") else "**" + ln[3:] + "**\n")
            if last and not ln.startswith("|"):
                keep[-1] = "`" + ln + "`"
    text = "\n".join(keep)
    return re.sub(r"\n{3,}", "\n\n", text) + "\n"


def update_readme() -> None:
    path = os.path.join(common.HERE, "README.md")
    with open(path) as f:
        readme = f.read()
    if BEGIN not in readme or END not in readme:
        print("README.md has no RESULTS markers; not updated", file=sys.stderr)
        return
    parts = [BEGIN, ""]
    for name in SCRIPTS:
        data = load(name)
        when = data.get("saved_at", "?") if data else "not run"
        load_s = f", load average {data['machine'].get('load_at_start')} at start" if data and "machine" in data \
            else ""
        parts.append(f"#### `{name}.py` ({when}{load_s})\n")
        parts.append(tables_of(name))
    parts.append(END)
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(head + "\n".join(parts) + tail)


def main() -> None:
    png = os.path.join(common.HERE, "latency.png")
    if chart(png):
        print(f"wrote {os.path.relpath(png, common.REPO)}")
    png = os.path.join(common.HERE, "data.png")
    if data_chart(png):
        print(f"wrote {os.path.relpath(png, common.REPO)}")
    update_readme()
    print("updated benchmarks/README.md tables")


if __name__ == "__main__":
    main()
