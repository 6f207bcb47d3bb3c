"""The latency-vs-rate plot (matplotlib, optional: without it the report has no plot)."""

from __future__ import annotations

from pathlib import Path

from .settings import P99_BOUND_MS
from .stats import by, combine


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    runs = results.get("runs", []) + results.get("ceiling_runs", [])
    lruns = results.get("litellm_runs", [])
    systems = list(results.get("systems", {}).items()) + [("litellm", "LiteLLM proxy")]
    # One legend row per three systems below the plots; 20 colours, so no two systems
    # share one (the default cycle has 10).
    legend_rows = -(-len(systems) // 3)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6 + 0.22 * legend_rows), sharey=True)
    colors = plt.get_cmap("tab20").colors
    for ax, p in zip(axes, ("p50", "p99")):
        for i, (key, label) in enumerate(systems):
            pts = []
            src = lruns if key == "litellm" else runs
            for rate in sorted({r["rate"] for r in src if r["system"] == key}):
                c = combine(by(src, key, rate))
                if c and c["lat_ms"][p] is not None and c["success"] > 0.5:
                    pts.append((rate, c["lat_ms"][p]))
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label, color=colors[i % len(colors)])
        ax.axhline(P99_BOUND_MS, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (req/s, open loop)")
        ax.set_title(f"{p} latency vs rate")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency (ms), log scale")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3)
    fig.suptitle("Zero-delay mock on 127.0.0.1; dotted line: the 5 ms p99 bound")
    fig.tight_layout(rect=(0, (0.1 + 0.2 * legend_rows) / (4.6 + 0.22 * legend_rows), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
