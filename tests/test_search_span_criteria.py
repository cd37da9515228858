"""The search's trained criteria record the local invariance ratio and the soft Fisher rank
(geohead.geometry.local_invariance) beside the old columns; the score's components follow their
formulas."""
from __future__ import annotations

import math

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
    base = {"rankme_backbone": 5.0, "dim_backbone": 32.0, "std_backbone": 0.5, "heff_spread": 0.3,
            "compression": out["compression"]}
    assert 1 <= out["fisher_tangent_rank"] and out["fisher_soft_rank_loss"] <= out["fisher_tangent_rank"]
    comps = score_components({**base, **out})
    assert comps["invariance"] == pytest.approx(1 / (1 + out["local_invariance"]))
    assert comps["fisher"] == pytest.approx(out["fisher_soft_rank_loss"] / out["fisher_tangent_rank"])
    # the score is the weighted mean of the components, by the formulas of score.py's docstring;
    # by default RankMe's alone: log RankMe / log d (compression is recorded, in no formula)
    assert comps["rankme"] == pytest.approx(math.log(5.0) / math.log(32.0))
    assert comps["uniformity"] == 0.5 and comps["conditioning"] == 0.3
    assert geometric_score({**base, **out}) == pytest.approx(math.log(5.0) / math.log(32.0))
    equal = {k: 1.0 for k in comps}
    assert geometric_score({**base, **out}, equal) == pytest.approx(sum(comps.values()) / len(comps))


def test_a_head_constant_on_the_orbits_is_measured_not_failed() -> None:
    """Its orbit compression is 0/0: recorded as NaN (counted worst by a score that weighs it),
    while a non-finite criterion that means divergence still fails the trial."""
    from geohead.search.criteria import TrialDiverged, _finite
    from geohead.search.score import low_compression

    class Constant(nn.Module):  # a saturated head: the same output for every image
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(32, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.lin(x) * 0 + 1)

    data = load_dataset("shapes", train=False, n=8, img_size=32, seed=0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()).eval()
    inputs = EvalInputs(data.images, None, data.images, None, data.images.float() / 255, (None, None),
                        (0.5,) * 3, (0.25,) * 3, families=("hue", "saturation"), tangent_images=4)
    out = _finite(_orbit_criteria(backbone, Constant(), inputs, "cpu", False), "criteria")
    assert math.isnan(out["compression_hue"]) and math.isnan(out["compression"]) and low_compression(out["compression"]) == 0
    with pytest.raises(TrialDiverged, match="non-finite rankme_head"):
        _finite({**out, "rankme_head": float("nan")}, "criteria")


def test_screen_records_the_escape_state_gradient_relative_to_curvature() -> None:
    """The screen's collapsed state is drawn, not an equilibrium: its ‖∇_Z f‖ relative to the
    curvature is recorded beside the escape curvature (the same number escape_curvature gives)."""
    from geohead.geometry import EscapeSettings, escape_curvature
    from geohead.heads import HeadSpec
    from geohead.objectives import CollapsedState, get_objective
    from geohead.search.criteria import ScreenInputs, build_head, screen

    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(16, 8, generator=g)
    z2 = z1 + 0.1 * torch.randn(16, 8, generator=g)
    c = (z1.mean(0) + 1e-2 * torch.randn(8, 8, generator=g), z1.mean(0) + 1e-2 * torch.randn(8, 8, generator=g))
    obj = get_objective("simclr")
    spec = HeadSpec(in_dim=8, out_dim=6, hidden_dim=12, depth=2, activation="silu")
    inputs = ScreenInputs(obj, z1, z2, c, {}, lambda k: None, seed=0)
    out = screen(spec, inputs)
    head, _ = build_head(spec, z1, 0)
    fast = EscapeSettings(mode="fast", dtype=torch.float32, pullback=False, objective_spectrum=False, m_over_h=True)
    esc = escape_curvature(head, obj, settings=fast, state=CollapsedState(c[0], c[1], "complete", 0, 1e-2),
                           generator=torch.Generator().manual_seed(0))
    assert esc.frame == "tangent"
    assert out["screen_escape_gradient_relative"] == pytest.approx(esc.gradient_relative, rel=1e-6)
    assert out["screen_escape_gradient_relative"] > esc.stationary_tol
