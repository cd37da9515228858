"""What the scale ladder measured, as the search prints it (geohead.search.ladder)."""
from __future__ import annotations

import pytest

from geohead.search.ladder import AXES, axis_finding, findings, load_ladder, recheck

LADDER = {"objectives": {
    "simclr": {"proxy": {"margin": 2.6, "seeds": [0, 1]},
               "axes": {"width": {"at": "d=256", "margin": 0.9, "seeds": [0]},
                        "budget": {"at": "100 epochs", "margin": 1.9, "seeds": [0, 1]}}},
    "vicreg": {"proxy": {"margin": 1.0, "seeds": [0]},
               "axes": {"data": {"at": "40,000 images", "margin": -0.4, "seeds": [0, 1]}}},
    # the linear probe holds on both axes; kNN turns on data and shrinks on width
    "barlow": {"proxy": {"margin": 1.5, "knn_margin": 1.9, "seeds": [0, 1]},
               "axes": {"width": {"at": "d=256", "margin": 2.8, "knn_margin": 0.9, "seeds": [0, 1]},
                        "data": {"at": "40,000 images", "margin": 1.2, "knn_margin": -0.4, "seeds": [0, 1]},
                        "budget": {"at": "100 epochs", "margin": 1.2, "knn_margin": 1.0, "seeds": [0, 1]}}},
}}


@pytest.mark.parametrize("proxy, margin, finding", [
    (2.6, 1.3, "holds"), (2.6, 1.29, "shrinks"), (2.6, 0.01, "shrinks"), (2.6, 0.0, "turns"), (1.5, 2.4, "holds"),
    (1.0, -0.4, "turns"),
])
def test_an_axis_holds_from_half_the_proxy_margin_and_turns_at_zero(proxy, margin, finding):
    assert axis_finding(proxy, margin) == finding


def test_findings_and_the_advice_name_the_axes_that_did_not_hold_first():
    f = findings("simclr", LADDER)
    assert f == {"width": ("shrinks", "width (d=256): +0.9 points, proxy +2.6: shrinks (seed 0)"),
                 "budget": ("holds", "budget (100 epochs): +1.9 points, proxy +2.6: holds (seeds 0, 1)")}
    assert recheck("simclr", LADDER).startswith("re-check width first (--confirm-backbone trains the verdict on your backbone); on the scale ladder")
    assert recheck("vicreg", LADDER).startswith("re-check data first") and "turns" in recheck("vicreg", LADDER)
    assert "has not measured this objective" in recheck("dino", LADDER) and findings("dino", LADDER) == {}


def test_an_axis_where_only_knn_turns_is_named_with_the_worse_probe():
    f = findings("barlow", LADDER)
    assert f["data"] == ("turns", "data (40,000 images): +1.2 points, proxy +1.5: holds; kNN -0.4, proxy +1.9: turns "
                                  "(seeds 0, 1)")
    assert f["width"][0] == "shrinks" and f["budget"][0] == "holds"  # kNN 0.9 < 1.9 / 2; 1.0 >= 0.95
    assert recheck("barlow", LADDER).startswith("re-check width and data first (--confirm-backbone trains the verdict on your backbone); on the scale ladder")


def test_the_shipped_ladder_is_well_formed(tmp_path):
    ladder = load_ladder()
    for objective, rec in ladder["objectives"].items():
        assert set(rec["axes"]) <= set(AXES) and rec["proxy"]["seeds"]
        for a in rec["axes"].values():
            assert isinstance(a["margin"], float) and isinstance(a["knn_margin"], float) and a["seeds"] and a["at"]
        assert recheck(objective)
    assert load_ladder(tmp_path / "absent.json") == {"objectives": {}}


def test_a_verdict_at_the_users_budget_takes_budget_off_the_axes_to_recheck():
    turned = {"objectives": {"barlow": {"proxy": {"margin": 1.5, "seeds": [0]},
                                        "axes": {"data": {"at": "40,000 images", "margin": -0.4, "seeds": [0]},
                                                 "budget": {"at": "300 epochs", "margin": -0.8, "seeds": [0]}}}}}
    assert recheck("barlow", turned).startswith("re-check data and budget first (--confirm-epochs trains the verdict "
                                                "at your budget); on the scale ladder")
    advice = recheck("barlow", turned, verdict_epochs=300.0)
    assert advice.startswith("re-check data first (the verdict trained 300 epochs, your budget); on the scale ladder")
    assert "budget (300 epochs): -0.8 points, proxy +1.5: turns" in advice       # what was measured is still said
    level = {"objectives": {"barlow": {"proxy": {"margin": 1.48, "seeds": [0, 1]},
                                       "axes": {"budget": {"at": "300 epochs", "margin": -0.02, "seeds": [0, 1]}}}}}
    assert findings("barlow", level)["budget"] == ("turns", "budget (300 epochs): -0.02 points, proxy +1.5: turns (seeds 0, 1)")
    assert recheck("dino", turned, verdict_epochs=50.0).startswith("the verdict trained 50 epochs, your budget; the scale")


def test_a_verdict_on_the_users_backbone_takes_width_off_the_axes_to_recheck():
    turned = {"objectives": {"barlow": {"proxy": {"margin": 1.5, "knn_margin": 1.9, "seeds": [0]},
                                        "axes": {"width": {"at": "d=512", "margin": -3.4, "knn_margin": -5.0, "seeds": [0]},
                                                 "budget": {"at": "300 epochs", "margin": -0.8, "knn_margin": 0.2,
                                                            "seeds": [0]}}}}}
    assert recheck("barlow", turned).startswith(
        "re-check width and budget first (--confirm-backbone trains the verdict on your backbone; --confirm-epochs "
        "trains the verdict at your budget); on the scale ladder")
    assert recheck("barlow", turned, verdict_d=512).startswith(
        "re-check budget first (the verdict trained on d=512, your backbone; --confirm-epochs trains the verdict at "
        "your budget); on the scale ladder")
    both = recheck("barlow", turned, verdict_epochs=300.0, verdict_d=512)
    assert both.startswith("the margin held on every other axis measured (the verdict trained 300 epochs, your budget, "
                           "on d=512, your backbone); on the scale ladder")
    assert "width (d=512): -3.4 points, proxy +1.5: turns; kNN -5.0, proxy +1.9: turns (seed 0)" in both
