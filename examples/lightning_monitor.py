"""A Barlow Twins LightningModule with geohead's collapse monitors as a Lightning callback.

The module is ordinary Lightning; ``GeometryCallback`` finds its ``backbone`` and
``projection_head`` attributes, records RankMe, α-ReQ and the std of normalised embeddings of
both every ``--every`` optimiser steps (and H_eff's extremes and ‖M‖/‖H‖ on every
``--hessian-every``-th record), and logs them through ``self.log`` as ``geometry/<key>``: here
to a CSV logger, with TensorBoard or W&B the same way. Needs ``pip install "geohead[lightning]"``.

Run (22 s with OMP_NUM_THREADS=1 on a 2-core machine shared with other jobs)::

    python examples/lightning_monitor.py
    python examples/lightning_monitor.py --n 64 --steps 4 --batch 32 --every 2   # a few seconds
"""
from __future__ import annotations

import argparse
import csv
import tempfile
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from geohead import GeometricHead
from geohead.backbones import create_backbone, feature_dim
from geohead.data import make_shapes, make_view_fn
from geohead.integrations.lightning import GeometryCallback
from geohead.objectives import get_objective

# Lightning 2.6 calls a pytree API that recent torch deprecates (Lightning's call, not this script's)
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning,
                        module=r"lightning\.pytorch\.utilities\._pytree")


class BarlowTwins(L.LightningModule):
    def __init__(self, mean, std, backbone: str = "resnet18_w16", hidden_dim: int = 512, out_dim: int = 512,
                 lr: float = 0.06) -> None:
        super().__init__()
        self.backbone = create_backbone(backbone, channels_last=False)
        self.projection_head = GeometricHead(feature_dim(self.backbone), out_dim, hidden_dim=hidden_dim)
        self.criterion = get_objective("barlow")
        self.views = make_view_fn("barlow", 32, mean, std, hue=0.5, crop_scale=(0.3, 1.0))
        self.lr = lr

    def training_step(self, batch, batch_idx):
        (images,) = batch
        x0, x1 = self.views(images)
        # one forward of both views: the monitor sees one batch per step (calls_per_step=1)
        z = self.projection_head(self.backbone(torch.cat([x0, x1])))
        z0, z1 = z.chunk(2)
        loss = self.criterion([z0, z1])
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2000, help="shapes training images")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--every", type=int, default=10, help="optimiser steps between records")
    p.add_argument("--hessian-every", type=int, default=2, help="H_eff on every K-th record (0: off)")
    p.add_argument("--backbone", default="resnet18_w16")
    p.add_argument("--out", type=Path, default=None, help="log folder (default: a temporary one)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    L.seed_everything(args.seed, verbose=False)
    data = make_shapes(args.n, seed=args.seed)
    loader = DataLoader(TensorDataset(data.images), batch_size=args.batch, shuffle=True, drop_last=True)
    module = BarlowTwins(data.mean, data.std, backbone=args.backbone)
    callback = GeometryCallback(every=args.every, objective="criterion", hessian_every=args.hessian_every)
    out = args.out or Path(tempfile.mkdtemp(prefix="geohead_lightning_"))
    trainer = L.Trainer(
        max_steps=args.steps, accelerator="cpu", devices=1, logger=CSVLogger(out, name="barlow"),
        callbacks=[callback], enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(module, loader)

    metrics = Path(trainer.logger.log_dir) / "metrics.csv"
    rows = [r for r in csv.DictReader(open(metrics)) if r.get("geometry/rankme_head")]
    print(f"{'step':>5s} {'RankMe bb':>9s} {'RankMe head':>11s} {'std head':>8s} {'λ_min H_eff':>11s}")
    for r in rows:
        lam = r.get("geometry/hessian_lambda_min")
        print(f"{r['step']:>5s} {float(r['geometry/rankme_backbone']):9.1f} {float(r['geometry/rankme_head']):11.1f} "
              f"{float(r['geometry/std_head']):8.4f} {f'{float(lam):11.3g}' if lam else '':>11s}")
    print(f"logged by Lightning to {metrics}")
    return callback.monitor.history


if __name__ == "__main__":
    main()
