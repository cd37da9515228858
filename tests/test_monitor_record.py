"""One collapse-monitor record: the Tracker, GeometryMonitor and the search's
trained criteria write geohead.geometry.collapse_record's keys with its values, bit for bit, and
the record's keys follow their reference formulas (docs/monitors.md)."""
from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from geohead.geometry import alpha_req, collapse_record, normalized_std, rankme

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(32, 8, generator=g), torch.randn(32, 5, generator=g) @ torch.randn(5, 6, generator=g)


def test_record_keys_follow_their_formulas() -> None:
    f, e = _batch()
    rec = collapse_record(f, e)
    for space, x in (("backbone", f), ("head", e)):
        w = x.shape[1]
        assert rec[f"rankme_{space}"] == rankme(x) and rec[f"std_{space}"] == normalized_std(x)
        assert rec[f"std_healthy_{space}"] == 1 / math.sqrt(w)
        assert rec[f"std_ratio_{space}"] == normalized_std(x) * math.sqrt(w)
        assert rec[f"alpha_req_{space}"] == alpha_req(x)
    assert "alpha_req_head" not in collapse_record(f, e, alpha=False)
    # a collapsed batch: one point repeated has std 0 and RankMe 1
    c = collapse_record(f[:1].repeat(4, 1), e[:1].repeat(4, 1), alpha=False)
    assert c["std_ratio_backbone"] == pytest.approx(0.0, abs=1e-6) and c["rankme_head"] == pytest.approx(1.0, abs=1e-4)
    nan = collapse_record(torch.full((4, 3), float("nan")), e[:4], alpha=False)
    assert math.isnan(nan["rankme_backbone"]) and nan["rankme_head"] == rankme(e[:4])


def test_the_monitor_and_the_search_write_the_record() -> None:
    from geohead import GeometricHead
    from geohead.monitor import GeometryMonitor
    from geohead.search.criteria import _feature_criteria

    f, _ = _batch(1)
    backbone, head = nn.Identity(), GeometricHead(8, 6, hidden_dim=16)
    monitor = GeometryMonitor(backbone, head, every=1)
    z = head(backbone(f)).detach()
    (rec,) = monitor.history
    monitor.detach()
    expect = collapse_record(f, z)
    assert {k: rec[k] for k in expect} == expect
    crit = _feature_criteria(f, z)
    assert {k: crit[k] for k in collapse_record(f, z, alpha=False)} == collapse_record(f, z, alpha=False)
    assert crit["rankme_backbone_frac"] == crit["rankme_backbone"] / 8


def test_the_training_loop_writes_the_record(tmp_path) -> None:
    from geohead.training.config import load_recipe
    from geohead.training.loop import train

    cfg = load_recipe("barlow_shapes_cpu", [
        f'out="{tmp_path / "run"}"', "data.n_train=128", "data.n_test=64", "optim.batch_size=32", "optim.max_steps=2",
        "track.monitor_every=1", "probe.enabled=false", "track.progress=false", 'backbone.name="resnet18_w16"'])
    train(cfg)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    mon = [r for r in lines if r.get("kind") == "monitor"]
    assert mon, lines
    keys = set(collapse_record(torch.randn(4, 3), torch.randn(4, 2), alpha=False))
    assert all(keys <= set(r) for r in mon)
    assert all(r["std_ratio_backbone"] == pytest.approx(r["std_backbone"] / r["std_healthy_backbone"]) for r in mon)
