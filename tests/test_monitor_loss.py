"""The loss in the collapse monitor's records: GeometryMonitor.log_loss and the Lightning callback."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from geohead import GeometricHead
from geohead.monitor import GeometryMonitor
from geohead.objectives import get_objective

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"),
]


def test_a_record_holds_the_mean_loss_given_since_the_record_before(tmp_path):
    """Step s is recorded at its first forward, before its loss exists: the record holds the mean
    of the losses of the steps after the previous record and before s, as given to log_loss."""
    torch.manual_seed(0)
    backbone, head = nn.Sequential(nn.Flatten(), nn.Linear(12, 10)), GeometricHead(10, 6, hidden_dim=16)
    losses = []
    with GeometryMonitor(backbone, head, every=3, log_file=tmp_path / "g.jsonl") as monitor:
        for step in range(1, 8):
            z = head(backbone(torch.randn(16, 3, 2, 2)))
            loss = z.pow(2).mean()
            losses.append(float(loss.detach()))
            monitor.log_loss(loss if step % 2 else losses[-1])  # a tensor or a float
    steps = [r["step"] for r in monitor.history]
    assert steps == [3, 6]
    assert monitor.history[0]["loss"] == pytest.approx(sum(losses[0:2]) / 2, rel=1e-6)  # steps 1, 2
    assert monitor.history[1]["loss"] == pytest.approx(sum(losses[2:5]) / 3, rel=1e-6)  # steps 3, 4, 5
    lines = [json.loads(s) for s in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert [ln["loss"] for ln in lines] == [r["loss"] for r in monitor.history]


def test_without_log_loss_a_record_has_no_loss():
    backbone, head = nn.Sequential(nn.Flatten(), nn.Linear(12, 10)), GeometricHead(10, 6, hidden_dim=16)
    with GeometryMonitor(backbone, head, every=1) as monitor:
        head(backbone(torch.randn(16, 3, 2, 2)))
    assert "loss" not in monitor.history[0]


def test_the_lightning_callback_records_the_modules_loss_and_does_not_log_it_again():
    L = pytest.importorskip("lightning")
    from geohead.integrations.lightning import GeometryCallback

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.backbone, self.projection_head = nn.Sequential(nn.Flatten(), nn.Linear(12, 10)), GeometricHead(10, 6, hidden_dim=16)
            self.criterion, self.losses = get_objective("barlow"), []

        def training_step(self, batch, batch_idx):
            z = self.projection_head(self.backbone(torch.cat([batch[0], batch[0].flip(-1)])))
            loss = self.criterion(list(z.chunk(2)))
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    callback, module = GeometryCallback(every=2), Module()
    trainer = L.Trainer(max_steps=5, accelerator="cpu", devices=1, logger=False, callbacks=[callback],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 3, 2, 2)), batch_size=16))
    history = callback.monitor.history
    assert [r["step"] for r in history] == [2, 4]
    assert history[0]["loss"] == pytest.approx(module.losses[0], rel=1e-6)  # step 1
    assert history[1]["loss"] == pytest.approx(sum(module.losses[1:3]) / 2, rel=1e-6)  # steps 2, 3
    assert "geometry/loss" not in trainer.callback_metrics
