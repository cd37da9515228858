"""The search's escape criterion: a constraint only where Thm 4.1's premise holds, and said so."""
from __future__ import annotations

import functools

import pytest
import torch

from geohead.config import HeadConfig
from geohead.objectives import get_objective
from geohead.geometry import EscapePremise
from geohead.search.escape import (
    criterion_record, describe_criterion, premise_head_spec, reference_premise, screen_verdict,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def premise(name: str, objective=None, predictor=None) -> EscapePremise:
    torch.manual_seed(0)
    d = 32
    z = torch.randn(64, d)
    mu, sd = z.mean(0), z.std(0)
    collapsed = tuple(mu + 1e-2 * sd * torch.randn(16, d) for _ in range(2))
    cfg = HeadConfig()
    return reference_premise(objective or get_objective(name), cfg.resolve(name, d), z, collapsed,
                             predictor or functools.partial(cfg.resolve_predictor, name), seed=0, spread=1e-2)


def test_the_premise_fails_for_barlow_and_the_criterion_is_off_with_the_reason() -> None:
    p = premise("barlow")
    assert not p.holds and p.frame == "ambient" and p.lambda_min_objective < 0 < p.lambda_max_objective
    assert p.objective == "barlow" and p.why.startswith("its Hessian is indefinite (λ_min -")
    assert "premise fails for barlow: its Hessian is indefinite (λ_min -" in criterion_record(p)["reason"]
    assert describe_criterion(p).startswith("escape criterion OFF: ") and "recorded, not used" in describe_criterion(p)
    # no pruning by escape curvature, whatever the head
    assert screen_verdict({"screen_escape_negative": 0.0}, p) is None


def test_where_the_premise_holds_stuck_heads_are_pruned() -> None:
    """MSE to a target through a linear predictor: ∇²_e L = (2/k)·I, PSD, and ∇_e L ≠ 0 at the
    perturbed collapsed state: the premise holds."""
    from geohead.heads import HeadSpec

    def linear(k: int) -> HeadSpec:
        return HeadSpec(in_dim=k, out_dim=k, hidden_dim=k, depth=1, activation="identity", norm=None)

    p = premise("byol", get_objective("byol", distance="mse"), linear)
    assert p.holds and p.frame == "ambient" and not p.gradient_vanishes
    assert p.lambda_min_objective == pytest.approx(p.lambda_max_objective) and p.lambda_min_objective > 0
    assert describe_criterion(p).startswith("escape criterion ON: Thm 4.1's premise holds for byol")
    assert criterion_record(p)["on"] is True and "reason" not in p.to_dict()
    verdict = screen_verdict({"screen_escape_negative": 0.0, "screen_escape_lambda_min": 1e-6}, p)
    assert verdict.startswith("screen: cannot escape collapse") and "ambient frame" in verdict
    assert screen_verdict({"screen_escape_negative": 3.0}, p) is None


def test_the_reference_head_is_narrow_but_keeps_prototypes() -> None:
    barlow = HeadConfig().resolve("barlow", 128)
    assert (premise_head_spec(barlow).hidden_dim, premise_head_spec(barlow).out_dim) == (256, 256)
    dino = HeadConfig().resolve("dino", 128)
    assert premise_head_spec(dino).prototypes == dino.prototypes and premise_head_spec(dino).out_dim == dino.out_dim
