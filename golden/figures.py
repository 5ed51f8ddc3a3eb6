"""The two figures of the golden job: per-layer/per-head retrieval and the trade-off curve."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLOURS = {"resv": "C3", "resv_tuned": "C1", "resv_sf": "C8", "resv_tuned_sf": "C7",
           "resv_noclust": "C5", "oracle_topk": "C0",
           "quest": "C6", "infinigen": "C9", "rekv": "C2", "window": "C4", "full": "k"}


def plot_retrieval(summary: dict, path):
    """The paper's Fig. 20 view: retrieval ratio per layer and per KV head."""
    layers = summary["layers"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw=dict(width_ratios=[2, 1, 1]))
    ax = axes[0]
    names = [m for m in summary["methods"] if m != "full"]
    width = 0.8 / len(names)
    x = np.arange(len(layers))
    for i, m in enumerate(names):
        ax.bar(x + i * width, summary["methods"][m]["per_layer_ratio"], width, label=m,
               color=COLOURS.get(m))
    ax.set_xticks(x + 0.4 - width / 2, [str(l) for l in layers])
    ax.set_xlabel("layer")
    ax.set_ylabel("retrieval ratio (past tokens)")
    ax.set_title(f"{summary['trace']}: retrieval per layer")
    ax.legend(fontsize=7, ncol=2)
    for ax, m in zip(axes[1:], ("resv", "resv_tuned")):
        lh = np.array(summary["methods"][m]["per_layer_head_ratio"])
        im = ax.imshow(lh.T, aspect="auto", cmap="viridis", vmin=0, vmax=max(lh.max(), 1e-3))
        ax.set_xticks(range(len(layers)), [str(l) for l in layers])
        ax.set_yticks(range(lh.shape[1]))
        ax.set_xlabel("layer")
        ax.set_ylabel("KV head")
        ax.set_title(f"{m}: per layer and head")
        fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pareto(summary: dict, path):
    """Per stage (rows): output error against retrieval ratio, one curve per method over its
    budget knob; and, at each ReSV preset's ratio (the matched-ratio table), each method's
    error against its prediction cost (the keys a query row scores, as a share of the past
    tokens; a method that predicts nothing sits at the left edge)."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for i, st in enumerate(("frame", "text")):
        for m, pts in summary["pareto"].items():
            pts = [p[st] for p in pts if p[st]["retrieval_ratio"] is not None]
            if not pts or m == "full":
                continue
            axes[i, 0].plot([p["retrieval_ratio"] for p in pts],
                            [p["output_rel_l2"] for p in pts], marker="o", ms=3, label=m,
                            color=COLOURS.get(m))
        ax = axes[i, 1]
        for preset, marker in (("resv", "o"), ("resv_tuned", "s")):
            row = summary.get("matched", {}).get(st, {}).get(preset)
            if not row:
                continue
            for m, p in row.items():
                if p is None or p.get("output_rel_l2") is None or \
                        m in ("float", "select_first"):
                    continue
                name = preset if m == "resv" else m
                ax.scatter(max(p["key_share"], 3e-3), p["output_rel_l2"], marker=marker,
                           color=COLOURS.get(name), s=40,
                           label=f"{name} @ {preset} ratio "
                                 f"{100 * row['resv']['retrieval_ratio']:.0f}%")
        axes[i, 0].set_xlabel(f"retrieval ratio ({st} stage, past tokens fetched)")
        ax.set_xlabel(f"prediction cost ({st} stage): keys scored a row / past tokens")
        for a in axes[i]:
            a.set_ylabel("relative L2 error of the output vs full attention")
            a.set_xscale("log")
            a.set_yscale("log")
            a.grid(alpha=0.3)
            a.legend(fontsize=6)
    fig.suptitle(f"{summary['trace']}: fidelity against retrieval, and against prediction "
                 f"cost at matched retrieval")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
