"""Depth ablation (head_depth_ablations.py): SimCLR with Swish + BN heads of depth 1, 2 and 3.

The released code trains SimCLR (NT-Xent τ = 0.1, Adam 1e-3, batch 512, 50 epochs, the Table 1
views) with a head of ``num_layers`` Linear layers (2048 wide, no bias), each followed by
BatchNorm, SiLU between them (depth 1 = Linear + BN: a linear head), then reports the 4-way
rotation accuracy of a linear probe (Adam, 5 epochs, raw features) on the backbone and on the
head, and the orbit compression of Table 1 (5 classes × 3 images × 12 rotations, L2-normalised
spreads, head applied to L2-normalised backbone features). Published (ResNet-18, CIFAR-10),
backbone / head / compression: depth 1: 47.5 % / 47.4 % / 49×; depth 2: 52.8 / 39.7 / 57×;
depth 3: 52.4 / 35.6 / 79×.

Columns as in orbit_compression.py and guillotine.py: paper's probe and formula on our models;
corrected = a converged linear probe (L-BFGS, standardised features) and the relative
(orbit/total spread, width- and scale-invariant) compression of the head's real outputs.

Scales: ``cpu`` = resnet18_w16 backbone (d = 128 instead of 512), 10,000 training images
(instead of 50,000), 20 epochs (instead of 50), heads at the paper's 2048 width, probes on
10,000 / 10,000 images. ``paper`` = ResNet-18 (CIFAR stem), full CIFAR-10, 50 epochs (GPU).
``smoke`` = seconds.

    flock /tmp/geohead-bench.lock python benchmarks/paper/depth_ablation.py [--scale cpu]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from orbit_compression import analyse  # noqa: E402

PAPER = {1: {"backbone": 0.4752, "head": 0.4740, "compression": 49.13},
         2: {"backbone": 0.5282, "head": 0.3970, "compression": 57.22},
         3: {"backbone": 0.5235, "head": 0.3561, "compression": 78.51}}
EPOCHS = {"smoke": 1, "cpu": 20, "paper": 50}


def depth_head(depth: int) -> dict:
    """The released FlexibleProjectionHead(num_layers=depth, activation='swish', use_bn=True)."""
    return {"hidden_dim": 2048, "out_dim": 2048, "depth": depth, "activation": "silu", "norm": "batch",
            "last_norm": "batch", "bias": False}


def run_depth(args, depth: int, train, test) -> dict:
    from geohead.probes import linear_probe

    cfg = C.simclr_config(args, f"simclr_swish_bn_depth{depth}", depth_head(depth), epochs=EPOCHS[args.scale],
                          batch_size=512, width_cut=64 if args.scale == "smoke" else None)
    model, run, (mean, std), train_s = C.train_or_load(cfg, args.overwrite)
    x_tr, y_tr = C.rot90_split(train, args.seed)
    x_te, y_te = C.rot90_split(test, args.seed + 1)
    b_tr, h_tr = C.features(model, x_tr, mean, std)
    b_te, h_te = C.features(model, x_te, mean, std)
    smoke = args.scale == "smoke"
    probes = {}
    for space, xtr, xte in (("backbone", b_tr, b_te), ("head", h_tr, h_te)):
        probes[space] = {"paper": C.paper_probe(xtr, y_tr, xte, y_te, None, epochs=1 if smoke else 5, seed=args.seed),
                         "corrected": linear_probe(xtr, y_tr, xte, y_te, max_iter=10 if smoke else 200)}
    geo = analyse(model, mean, std, test, args)
    return {"probes": probes, "compression_paper": geo["paper_z"]["spread"] / geo["paper_h"]["spread"],
            "compression_relative": geo["compression"]["relative"], "compression_paper_l2_fixed": geo["compression"]["paper_l2"],
            "class_orbit_paper": [geo["paper_z"]["ratio"], geo["paper_h"]["ratio"]],
            "class_orbit_fixed": [geo["paper_z_raw"]["ratio"], geo["paper_h_raw"]["ratio"]],
            "run": str(run), "train_s": round(train_s, 1), "epochs": cfg.optim.epochs, "backbone": cfg.backbone.name,
            "width": cfg.head.spec["hidden_dim"]}


def table(res: dict, args, n_tr: int, n_te: int) -> C.Table:
    r0 = next(iter(res.values()))
    t = C.Table(f"Depth ablation: SimCLR, Swish+BN heads {r0['width']} wide, backbone {r0['backbone']}, "
                f"{r0['epochs']:g} epochs, batch 512, rotation probes on {n_tr} / {n_te} images, scale {args.scale}")
    for depth, r in res.items():
        p = PAPER[depth]
        t.add(f"depth {depth}: backbone rotation accuracy (%)", 100 * p["backbone"], 100 * r["probes"]["backbone"]["paper"],
              100 * r["probes"]["backbone"]["corrected"], "corrected: L-BFGS linear probe, standardised")
        t.add(f"depth {depth}: head rotation accuracy (%)", 100 * p["head"], 100 * r["probes"]["head"]["paper"],
              100 * r["probes"]["head"]["corrected"])
        t.add(f"depth {depth}: orbit compression (×)", p["compression"], r["compression_paper"], r["compression_relative"],
              f"paper_l2 with head(z): {r['compression_paper_l2_fixed']:.3g}")
    return t


def plot(res: dict, path: Path, title: str) -> None:
    plt = C.pyplot()
    depths = list(res)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    for space, colour in (("backbone", "tab:blue"), ("head", "tab:orange")):
        ax.plot(depths, [100 * PAPER[d][space] for d in depths], "o:", color=colour, alpha=0.6, label=f"{space}, paper")
        ax.plot(depths, [100 * res[d]["probes"][space]["paper"] for d in depths], "s--", color=colour,
                label=f"{space}, paper's probe (ours)")
        ax.plot(depths, [100 * res[d]["probes"][space]["corrected"] for d in depths], "^-", color=colour,
                label=f"{space}, converged probe (ours)")
    ax.axhline(25, color="gray", ls=":", lw=1)
    ax.set_xticks(depths)
    ax.set_xlabel("head depth (Linear layers)")
    ax.set_ylabel("rotation accuracy (%)")
    ax.legend(fontsize=7)
    ax.set_title("guillotine vs depth")
    ax = axes[1]
    ax.semilogy(depths, [PAPER[d]["compression"] for d in depths], "ko:", label="paper")
    ax.semilogy(depths, [res[d]["compression_paper"] for d in depths], "rs--", label="paper's formula + pipeline (ours)")
    ax.semilogy(depths, [res[d]["compression_paper_l2_fixed"] for d in depths], "mD--", label="paper's formula, head(z) (ours)")
    ax.semilogy(depths, [res[d]["compression_relative"] for d in depths], "b^-", label="relative compression (ours)")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xticks(depths)
    ax.set_xlabel("head depth (Linear layers)")
    ax.set_ylabel("orbit compression (×)")
    ax.legend(fontsize=7)
    ax.set_title("rotation-orbit compression vs depth")
    fig.suptitle(title, fontweight="bold", fontsize=10)
    fig.tight_layout()
    C.figure(path, fig)


def main(argv: list[str] | None = None) -> None:
    p = C.parser(__doc__, "depth_ablation")
    p.add_argument("--depths", nargs="+", type=int, choices=[1, 2, 3], default=[1, 2, 3])
    args = C.finish_args(p.parse_args(argv))
    t0 = time.perf_counter()
    n = 256 if args.scale == "smoke" else None
    train, test = C.load_split(args, train=True, n=n), C.load_split(args, train=False, n=n)
    res = {}
    for depth in args.depths:
        print(f"depth {depth} ...", flush=True)
        res[depth] = run_depth(args, depth, train, test)
    t = table(res, args, len(train), len(test))
    plot(res, args.out / "depth_ablation.png", t.title)
    C.report(args, [t], {"depths": res}, t0)


if __name__ == "__main__":
    main()
