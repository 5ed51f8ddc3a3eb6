"""The two figures of the golden job: per-layer/per-head retrieval and the trade-off curve."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLOURS = {"resv": "C3", "resv_tuned": "C1", "resv_noclust": "C5", "topk": "C0", "rekv": "C2",
           "window": "C4", "full": "k"}


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
    """Output fidelity against retrieval ratio, one curve per method over its budget knob."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for m, pts in summary["pareto"].items():
        r = [p["retrieval_ratio"] for p in pts]
        c = [p["output_cosine"] for p in pts]
        rec = [p["mass_recall"]["frame"] if p["mass_recall"]["frame"] is not None
               else p["mass_recall"]["text"] for p in pts]
        kw = dict(marker="o", label=m, color=COLOURS.get(m))
        axes[0].plot(r, c, **kw)
        axes[1].plot(r, rec, **kw)
    axes[0].set_ylabel("output cosine vs full attention")
    axes[1].set_ylabel("attention-mass recall (frame stage)")
    for ax in axes:
        ax.set_xlabel("retrieval ratio (past tokens fetched)")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{summary['trace']}: fidelity against retrieval, each method's budget swept")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
