"""Table 1 / Table 5 (orbit compression): how much the SimCLR head shrinks rotation orbits.

The released code (experiments.py, Exp. 2a-2c; plot_results.py) pretrains SimCLR (NT-Xent τ = 0.1,
a 2-layer head Linear-BN-ReLU-Linear-BN with 2048 hidden and 2048 output units, Adam 1e-3, batch
256, 50 epochs on CIFAR-10), then takes 5 classes × 3 test images × 12 rotations (0°, 30°, …,
330°, black corners) and reports, backbone → head:

* orbit spread (mean squared distance of a view to its orbit centroid) and the compression
  factor spread_z / spread_h (paper, ResNet-18: 21.85×; Table 5, ViT-Tiny: 4015×);
* D_intra (mean pairwise distance inside an orbit, 4.77× smaller), D_inter (mean distance
  between class centroids, 3.89× smaller) and their ratio, class/orbit 2.04 → 2.50;
* orbit curvature ratio head/backbone, mean ‖ŝ_{j+1} − 2ŝ_j + ŝ_{j−1}‖ over 200 test images
  rotated 0-45° in 10 steps (1.93×).

Two things in the released measurement are not what the table says (docs/theory.md, "Measurement pitfalls"):

1. *Formula*: the spreads are absolute, so a head that shrinks *everything* (orbits and the
   distances between images alike) reports a large "compression"; D_intra and D_inter shrink by
   similar factors (4.77× and 3.89×), which is what a global shrinkage looks like. geohead's
   default compression is relative: (orbit/total spread) in the backbone over the same in the
   head — scale- and width-invariant, > 1 only when orbits shrink more than the spread between
   images.
2. *Pipeline*: the orbit study feeds the head L2-normalised backbone features,
   ``h = normalize(head(normalize(backbone(x))))``, while the head was trained on raw features
   and runs BatchNorm in eval mode with running statistics of raw features. geohead's
   corrected column uses ``head(backbone(x))``.

The corrected column: relative compression; D_intra and D_inter divided by the mean pairwise
distance of all points in the same space; class/orbit ratio on the head's real outputs;
curvature as the mean turning angle between successive chords (scale- and speed-free; the
paper's ‖Δ²ŝ‖ grows with the square of the speed at which a view moves, even along a straight
path). Extra rows separate the two corrections.

Scales: ``cpu`` = ResNet-18 at 1/4 width with timm's stride-4 stem (``resnet18_w16``, d = 128,
0.7 M parameters, instead of ResNet-18 with the CIFAR stem, d = 512, 11 M), 10,000 training
images (../shared/data, instead of 50,000), 30 epochs (instead of 50); the head keeps the
paper's 2048 widths. ``paper`` = ResNet-18 (CIFAR stem) and ViT-Tiny (Table 5), 50 epochs, full
CIFAR-10 (GPU; not run here). ``smoke`` = seconds. The pretrained run is shared with
``guillotine.py``.

    flock /tmp/geohead-bench.lock python benchmarks/paper/orbit_compression.py [--scale cpu]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

#: Published numbers (results/cifar10/{resnet18,vit_tiny}: experiment_log.txt and the orbit arrays).
PAPER = {
    "resnet18": {"spread_z": 0.02248, "spread_h": 0.001029, "compression": 21.85, "d_intra": 4.77, "d_inter": 3.89,
                 "ratio_z": 2.04, "ratio_h": 2.50, "curvature": 1.93, "total_z": 0.2438, "total_h": 0.01632},
    "vit_tiny": {"compression": 4015.0, "d_intra": 63.96, "d_inter": 56.24, "ratio_z": 2.12, "ratio_h": 2.42,
                 "curvature": 2.59, "total_z": 0.1298, "total_h": 4.429e-05},
}

#: The Table 1 model: the released ProjectionHead(activation='relu', use_bn=True).
TABLE1_HEAD = {"hidden_dim": 2048, "out_dim": 2048, "depth": 2, "activation": "relu", "norm": "batch",
               "last_norm": "batch", "bias": False}
EPOCHS = {"smoke": 1, "cpu": 30, "paper": 50}


def table1_model(args, backbone: str | None = None):
    """The shared Table 1 / guillotine SimCLR model (trained once, then resumed from the cache)."""
    tag = "simclr_relu_bn" + (f"_{backbone}" if backbone else "")
    cfg = C.simclr_config(args, tag, TABLE1_HEAD, epochs=EPOCHS[args.scale], batch_size=256, backbone=backbone,
                          width_cut=64 if args.scale == "smoke" else None)
    return cfg, C.train_or_load(cfg, args.overwrite)


def orbits(model, mean, std, images: torch.Tensor, angles, rotate) -> dict[str, torch.Tensor]:
    """(N, P, ·) orbits: raw backbone z, head(z), and the released pipeline's normalised versions."""
    encode = C.encoder(model.backbone, mean, std)
    zs = torch.stack([encode(rotate(images, a)) for a in angles], 1)  # (N, P, d)
    n, P, d = zs.shape
    with torch.no_grad():
        flat = zs.reshape(n * P, d)
        h_raw = model.head(flat).reshape(n, P, -1)
        h_paper = F.normalize(model.head(F.normalize(flat, dim=1)), dim=1).reshape(n, P, -1)
    return {"z": zs, "z_l2": F.normalize(zs, dim=-1), "h": h_raw, "h_l2": F.normalize(h_raw, dim=-1),
            "h_paper": h_paper}


def analyse(model, mean, std, test, args) -> dict:
    from geohead.geometry.orbits import compression, orbit_curvature_paper, orbit_turning, space_geometry, total_spread

    per = 1 if args.scale == "smoke" else 3
    idx = C.per_class(test, C.ORBIT_CLASSES, per, args.seed)
    imgs, labels = C.to_unit(test.images[idx]), test.labels[idx]
    angles = [30.0 * j for j in range(12)]
    o = orbits(model, mean, std, imgs, angles, C.rotate_zero_fill)
    pz, ph = C.paper_orbit_metrics(o["z_l2"], labels), C.paper_orbit_metrics(o["h_paper"], labels)
    pz_raw, ph_raw = C.paper_orbit_metrics(o["z"], labels), C.paper_orbit_metrics(o["h"], labels)
    g_z, g_h = space_geometry(o["z"], labels), space_geometry(o["h"], labels)
    g_hp = space_geometry(o["h_paper"], labels)
    comp = compression(g_z, g_h)
    comp_paper_pipe = compression(space_geometry(o["z_l2"], labels), g_hp)

    # curvature: 200 random test images, 10 angles 0-45° (released: Exp. 2b, head(backbone(x)))
    g = torch.Generator().manual_seed(args.seed)
    n_curv = 16 if args.scale == "smoke" else 200
    cidx = torch.randperm(len(test), generator=g)[:n_curv]
    sweep = torch.linspace(0, 45, 10).tolist()
    oc = orbits(model, mean, std, C.to_unit(test.images[cidx]), sweep, C.rotate_zero_fill)
    curv = {"paper_z": orbit_curvature_paper(oc["z"]), "paper_h": orbit_curvature_paper(oc["h"]),
            "turn_z": orbit_turning(oc["z"]), "turn_h": orbit_turning(oc["h"])}
    return {"orbits": o, "labels": labels, "paper_z": pz, "paper_h": ph, "paper_z_raw": pz_raw, "paper_h_raw": ph_raw,
            "geo_z": g_z.to_dict(), "geo_h": g_h.to_dict(), "geo_h_paper_pipeline": g_hp.to_dict(),
            "compression": comp, "compression_paper_pipeline": comp_paper_pipe, "curvature": curv,
            "total_spread": {"z_l2": total_spread(o["z_l2"]), "h_paper": total_spread(o["h_paper"]),
                             "h_l2": total_spread(o["h_l2"])},
            "n_orbits": len(idx), "n_curvature_images": n_curv}


def table(res: dict, paper: dict, title: str) -> C.Table:
    pz, ph, pzr, phr = res["paper_z"], res["paper_h"], res["paper_z_raw"], res["paper_h_raw"]
    comp, cpp, cv = res["compression"], res["compression_paper_pipeline"], res["curvature"]
    t = C.Table(title)
    t.add("orbit spread, backbone (L2-normalised z)", paper.get("spread_z"), pz["spread"], None)
    t.add("orbit spread, head", paper.get("spread_h"), ph["spread"], None, "paper's formula: normalize(head(normalize(z)))")
    ts = res["total_spread"]
    t.add("total spread (all views), backbone, L2-normalised", paper.get("total_z"), ts["z_l2"], ts["z_l2"])
    t.add("total spread (all views), head, L2-normalised", paper.get("total_h"), ts["h_paper"], ts["h_l2"],
          "the released pipeline shrinks everything, not orbits: corrected = head(z)")
    t.add("orbit compression (×)", paper["compression"], pz["spread"] / ph["spread"], comp["relative"],
          "corrected: (orbit/total spread)_z / (orbit/total)_h, head(z)")
    t.add("  compression, paper_l2 on head(z) (pipeline fixed only)", None, None, comp["paper_l2"])
    t.add("  compression, relative on the released pipeline (formula fixed only)", None, None, cpp["relative"])
    t.add("D_intra shrink z→h (×)", paper["d_intra"], pz["d_intra"] / ph["d_intra"],
          (pzr["d_intra"] / pzr["d_all"]) / (phr["d_intra"] / phr["d_all"]), "corrected: D / mean pairwise distance")
    t.add("D_inter shrink z→h (×)", paper["d_inter"], pz["d_inter"] / ph["d_inter"],
          (pzr["d_inter"] / pzr["d_all"]) / (phr["d_inter"] / phr["d_all"]))
    t.add("class/orbit ratio D_inter/D_intra, backbone", paper["ratio_z"], pz["ratio"], pzr["ratio"])
    t.add("class/orbit ratio D_inter/D_intra, head", paper["ratio_h"], ph["ratio"], phr["ratio"], "corrected: head(z)")
    t.add("orbit curvature ratio head/backbone (×)", paper["curvature"], cv["paper_h"] / cv["paper_z"],
          cv["turn_h"] / cv["turn_z"], "corrected: mean turning angle (scale-, speed-free)")
    return t


def plot(res: dict, path: Path, title: str) -> None:
    plt = C.pyplot()
    o, labels = res["orbits"], res["labels"]
    panels = [("backbone z (L2-normalised)", o["z_l2"]),
              ("head, released pipeline: normalize(head(normalize(z)))", o["h_paper"]),
              ("head, corrected: head(z) (L2-normalised for display)", o["h_l2"])]
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.6))
    colours = plt.cm.tab10(torch.linspace(0, 1, 10).numpy())
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    for ax, (name, pts) in zip(axes, panels):
        n, P, D = pts.shape
        flat = pts.reshape(n * P, D).to(torch.float64)
        flat = flat - flat.mean(0)
        _, _, v = torch.linalg.svd(flat, full_matrices=False)
        xy = (flat @ v[:2].T).reshape(n, P, 2)
        for i in range(n):
            c = colours[int(labels[i])]
            loop = torch.cat([xy[i], xy[i, :1]])
            ax.plot(loop[:, 0], loop[:, 1], color=c, alpha=0.6, lw=1.2)
            ax.scatter(xy[i, :, 0], xy[i, :, 1], color=c, s=14)
            ax.scatter(xy[i, 0, 0], xy[i, 0, 1], color=c, s=110, marker="*", edgecolors="k", linewidths=0.8)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
        ax.grid(alpha=0.3)
    pz, ph = res["paper_z"], res["paper_h"]
    comp = res["compression"]
    axes[1].text(0.02, 0.98, f"paper's formula: spread {ph['spread']:.2e}\ncompression {pz['spread'] / ph['spread']:.1f}×",
                 transform=axes[1].transAxes, va="top", fontsize=9, bbox=dict(fc="mistyrose", ec="k"))
    axes[2].text(0.02, 0.98, f"relative compression {comp['relative']:.2f}×\n(paper_l2 on head(z): {comp['paper_l2']:.1f}×)",
                 transform=axes[2].transAxes, va="top", fontsize=9, bbox=dict(fc="lightcyan", ec="k"))
    axes[0].text(0.02, 0.98, f"spread {pz['spread']:.2e}", transform=axes[0].transAxes, va="top", fontsize=9,
                 bbox=dict(fc="lightyellow", ec="k"))
    handles = [plt.Line2D([], [], color=colours[c], lw=3, label=names[c]) for c in sorted(set(labels.tolist()))]
    handles.append(plt.Line2D([], [], color="gray", marker="*", ls="none", markersize=10, label="0°"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)
    fig.suptitle(title, fontweight="bold")
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    C.figure(path, fig)


def main(argv: list[str] | None = None) -> None:
    args = C.finish_args(C.parser(__doc__, "orbit_compression").parse_args(argv))
    t0 = time.perf_counter()
    test = C.load_split(args, train=False)
    backbones = [None] if args.scale != "paper" else ["resnet18_cifar", "vit_tiny_cifar"]
    tables, results = [], {}
    for bb in backbones:
        cfg, (model, run, (mean, std), train_s) = table1_model(args, bb)
        key = "vit_tiny" if bb == "vit_tiny_cifar" else "resnet18"
        res = analyse(model, mean, std, test, args)
        name = cfg.backbone.name
        w = cfg.head.spec["hidden_dim"]
        title = (f"Table {'5' if key == 'vit_tiny' else '1'}: rotation-orbit compression, SimCLR ReLU+BN head "
                 f"{w}-{w}, backbone {name}, {cfg.optim.epochs:g} epoch(s), scale {args.scale}")
        tables.append(table(res, PAPER[key], title))
        plot(res, args.out / f"orbit_compression_{name}.png", title)
        results[name] = {k: v for k, v in res.items() if k not in ("orbits", "labels")}
        results[name]["run"] = str(run)
        results[name]["train_s"] = round(train_s, 1)
    if args.scale != "paper":
        print("\nTable 5 (ViT-Tiny, paper 4015×) runs at --scale paper only (a GPU job); "
              "benchmarks/paper/published.py recomputes it from the released arrays.")
    C.report(args, tables, results, t0)


if __name__ == "__main__":
    main()
