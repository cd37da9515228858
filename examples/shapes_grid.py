"""Draw a grid of built-in "shapes" samples (one column per class) as a PNG for the README.

    python examples/shapes_grid.py                      # -> docs/shapes_grid.png
    python examples/shapes_grid.py --img-size 64 --rows 4 --out /tmp/grid.png

The images are the training split at their native resolution (32x32 by default), shown with
nearest-neighbour upscaling so that the pixels the models see are what the figure shows.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from geohead.data import load_dataset


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "shapes_grid.png"))
    p.add_argument("--rows", type=int, default=6)
    p.add_argument("--img-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = load_dataset("shapes", n=10 * args.rows, img_size=args.img_size, seed=args.seed)  # exactly balanced
    cols = data.num_classes
    fig, axes = plt.subplots(args.rows, cols, figsize=(cols * 0.9, args.rows * 0.9 + 0.4))
    for c in range(cols):
        idx = (data.labels == c).nonzero().squeeze(1)[: args.rows]
        for r in range(args.rows):
            ax = axes[r, c]
            ax.imshow(data.images[idx[r]].permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(data.class_names[c], fontsize=8)
    fig.suptitle(
        f"geohead built-in 'shapes' ({args.img_size}x{args.img_size}): hue, saturation, brightness, rotation, "
        "scale, position, background and noise drawn independently and recorded",
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97), pad=0.2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out} ({torch.Size(data.images.shape[1:])} images, {args.rows} per class)")


if __name__ == "__main__":
    main()
