"""The search's escape criterion: a constraint only where Thm 4.1's premise holds, and said so."""
from __future__ import annotations

import functools

import pytest
import torch

from geohead.training.config import HeadConfig
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
    assert "not needed for barlow (not a fault): Thm 4.1's premise fails there: its Hessian is indefinite (λ_min -" in criterion_record(p)["reason"]
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


@pytest.mark.usefixtures("one_thread", "tiny_whitening")
@pytest.mark.parametrize("escape", [True, False])
def test_no_escape_keeps_the_heads_the_constraint_prunes(tmp_path, monkeypatch, escape: bool) -> None:
    """DINO (premise holds). The screen is made to report every head as unable to escape (its
    real criteria, with ``screen_escape_negative`` set to 0): with the constraint on, every trial
    but the published head's is pruned by the screen and marked infeasible; ``escape=False``
    (``--no-escape``) trains them all, with the escape numbers still recorded, and the study's
    settings say the constraint was off."""
    import optuna

    from geohead.search import SearchConfig, run_search, trial as trial_module

    real = trial_module.screen
    monkeypatch.setattr(trial_module, "screen", lambda *a, **k: {**real(*a, **k), "screen_escape_negative": 0.0})
    out = tmp_path / "s"
    cfg = SearchConfig(objective="dino", out=str(out), n_train=256, batch_size=64, steps=2, probe_train=128,
                       probe_test=64, orbit_images=8, families=("hue",), screen_batch=64, timeout=None,
                       progress=False, trials=3, confirm_seeds=0, escape=escape)
    run_search(cfg)
    study = optuna.load_study(study_name=cfg.study_name, storage=f"sqlite:///{out / 'study.db'}")
    others = [t for t in study.trials if not t.user_attrs.get("reference") and "duplicate_of" not in t.user_attrs]
    assert len(others) >= 2, [t.user_attrs for t in study.trials]
    for t in others:
        assert "screen_escape_lambda_min" in t.user_attrs  # recorded either way
        pruned_by_screen = str(t.user_attrs.get("pruned_by", "")).startswith("screen: cannot escape")
        assert pruned_by_screen is escape and t.user_attrs["constraint"] == (1.0 if escape else 0.0)
        assert (t.state == optuna.trial.TrialState.PRUNED) is escape
    assert ("escape" in study.user_attrs["search_config"]) is (not escape)
