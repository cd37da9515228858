"""benchmarks/score_ablation.py re-scores the stored heads with the score their searches used."""
from __future__ import annotations

import pytest
from conftest import benchmark_module

from geohead.search.score import SCORE_WEIGHTS, THEORY_WEIGHTS, UNRECORDED_WEIGHTS


@pytest.fixture(scope="module")
def ablation():
    return benchmark_module("score_ablation")


def test_theory_rescore_reproduces_the_recorded_score(ablation):
    """On the theory searches the 4-component re-score of every stored head is its recorded score."""
    by_obj = ablation.load(ablation.HEAD_SETS["theory"])
    assert sorted(by_obj) == ["barlow", "byol", "dino", "simclr", "simsiam", "vicreg"]
    assert ablation.SCORES["theory4"] == UNRECORDED_WEIGHTS["theory"]
    for rows in by_obj.values():
        assert len(rows) == 6
        for r in rows:
            assert ablation.rescore(r, ablation.SCORES["theory4"]) == pytest.approx(r["search"]["score"], abs=1e-9)


def test_rankme_rescore_reproduces_the_rankme_searches(ablation):
    """The same re-scoring with RankMe's weights gives the RankMe searches' recorded score."""
    for rows in ablation.load(ablation.HEAD_SETS["rankme"]).values():
        for r in rows:
            assert ablation.rescore(r, SCORE_WEIGHTS) == pytest.approx(r["search"]["score"], abs=1e-9)


def test_the_pick_rule_finds_each_searchs_pick(ablation):
    """Best recorded score among the completed heads = the head each search labelled ``found``."""
    for files in ablation.HEAD_SETS.values():
        for rows in ablation.load(files).values():
            found = next(r["trial"] for r in rows if r["label"] == "found")
            assert ablation.pick(rows, [r["search"]["score"] for r in rows])["trial"] == found


def test_the_three_component_score_is_the_default_without_low_compression(ablation):
    assert ablation.SCORES["theory3"] == THEORY_WEIGHTS == {k: w for k, w in ablation.SCORES["theory4"].items()
                                                            if k != "low_compression"}
    assert "low_compression" not in ablation.SCORES["theory3"] and len(ablation.SCORES["theory3"]) == 3
