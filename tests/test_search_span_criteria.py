"""The search's trained criteria record the local invariance ratio and the soft Fisher rank
(geohead.geometry.span) beside the old columns (issue 14); the score uses them in place of the
global orbit compression (issue 15)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from geohead.data import load_dataset
from geohead.heads import GeometricHead
from geohead.search.criteria import EvalInputs, _orbit_criteria
from geohead.search.score import geometric_score, score_components

pytestmark = pytest.mark.usefixtures("one_thread")


def test_orbit_criteria_record_local_invariance_and_soft_fisher_rank() -> None:
    torch.manual_seed(0)
    data = load_dataset("shapes", train=False, n=8, img_size=32, seed=0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()).eval()
    head = GeometricHead(32, 16, hidden_dim=32, depth=2, activation="silu").eval()
    inputs = EvalInputs(data.images, None, data.images, None, data.images.float() / 255, (None, None),
                        (0.5,) * 3, (0.25,) * 3, families=("hue", "saturation"), tangent_images=4)
    out = _orbit_criteria(backbone, head, inputs, "cpu", False)
    assert 0 < out["local_invariance"] < float("inf")
    assert 1 <= out["fisher_effective_rank"] and out["fisher_soft_rank_loss"] >= 0
    base = {"rankme_backbone": 5.0, "dim_backbone": 32.0, "std_backbone": 0.5, "heff_isotropy": 0.3,
            "compression": out["compression"]}
    assert 1 <= out["fisher_tangent_rank"] and out["fisher_soft_rank_loss"] <= out["fisher_tangent_rank"]
    comps = score_components({**base, **out})
    assert comps["invariance"] == pytest.approx(1 / (1 + out["local_invariance"]))
    assert comps["fisher"] == pytest.approx(out["fisher_soft_rank_loss"] / out["fisher_tangent_rank"])
    # the global compression is recorded, not scored
    assert geometric_score({**base, **out, "compression": 100.0}) == geometric_score({**base, **out})
