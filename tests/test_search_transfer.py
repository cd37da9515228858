"""benchmarks/search_transfer.py at smoke scale (15-40 s on 2 cores): the pipeline from search to full-budget table."""
from __future__ import annotations

import json

import pytest
from conftest import benchmark_module

pytestmark = pytest.mark.usefixtures("tiny_whitening")


def test_transfer_benchmark_at_smoke_scale(tmp_path, shared_data) -> None:
    search_transfer = benchmark_module("search_transfer")
    out = tmp_path / "transfer"
    assert search_transfer.main(["--scale", "smoke", "--data-dir", str(shared_data), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    labels = [r["label"] for r in res["runs"]]
    assert labels[:3] == ["found", "published", "preset_silu"]
    for r in res["runs"]:
        assert 0.0 <= r["knn_backbone"] <= 1.0 and 0.0 <= r["linear_backbone"] <= 1.0 and r["steps"] == 2
    s = res["summaries"][0]
    assert s["objective"] == "barlow" and s["found_minus_published_linear_points"] is not None
    assert "found" in (out / "table.md").read_text()
    # a rerun reuses the search and every finished run, and keeps the --results file's other objectives
    before = (out / "barlow" / "search" / "search.json").stat().st_mtime
    tracked = tmp_path / "tracked.json"
    other = {**res["runs"][0], "objective": "simclr", "knn_backbone": 0.5}
    tracked.write_text(json.dumps({**res, "runs": res["runs"] + [other],
                                   "summaries": res["summaries"] + [{**res["summaries"][0], "objective": "simclr"}]}))
    argv = ["--scale", "smoke", "--data-dir", str(shared_data), "--out", str(out), "--results", str(tracked)]
    assert search_transfer.main(argv) == 0
    assert (out / "barlow" / "search" / "search.json").stat().st_mtime == before
    again = json.loads(tracked.read_text())
    assert [r["wall_s"] for r in again["runs"] if r["objective"] == "barlow"] == [r["wall_s"] for r in res["runs"]]
    assert [r for r in again["runs"] if r["objective"] == "simclr"] == [other]
    assert [s["objective"] for s in again["summaries"]] == ["simclr", "barlow"]


def test_budget_plan_order_and_labels() -> None:
    """search_budget.py trains found/published at the first seed first, then the other seeds, then
    the extra heads; ``--labels`` keeps only the heads named, in that order."""
    search_budget = benchmark_module("search_budget")

    full = search_budget.plan(["barlow", "simclr"], [0, 1])
    assert full[:4] == [("barlow", "found", 0), ("barlow", "published", 0), ("simclr", "found", 0),
                        ("simclr", "published", 0)]
    assert full[4:8] == [("barlow", "found", 1), ("barlow", "published", 1), ("simclr", "found", 1),
                         ("simclr", "published", 1)]
    assert full[8:] == [("barlow", "preset_silu", 0), ("barlow", "best_deep", 0), ("simclr", "preset_silu", 0),
                        ("simclr", "best_deep", 0)]
    assert search_budget.plan(["simclr"], [0, 1], ("found", "published")) == [
        ("simclr", "found", 0), ("simclr", "published", 0), ("simclr", "found", 1), ("simclr", "published", 1)]


def test_criteria_transfer_merges_files_by_objective() -> None:
    """criteria_transfer.py --transfer A B: an objective B re-measured replaces all of A's runs of
    it (none of A's stale rows survive); objectives only in A stay."""
    criteria_transfer = benchmark_module("criteria_transfer")
    old = {"runs": [{"objective": "barlow", "trial": 1, "v": "a"}, {"objective": "byol", "trial": 1, "v": "a"},
                    {"objective": "byol", "trial": 2, "v": "a"}]}
    new = {"runs": [{"objective": "byol", "trial": 3, "v": "b"}]}
    merged = criteria_transfer.merge([old, new])["runs"]
    assert [(r["objective"], r["trial"], r["v"]) for r in merged] == [("barlow", 1, "a"), ("byol", 3, "b")]
    assert criteria_transfer.merge([new, old])["runs"] == old["runs"]


def test_criteria_transfer_picks_the_first_head_under_a_subset() -> None:
    """picks(): the re-trained head a subset's equal-weight score ranks first, and its margin over
    the published head's mean over seeds, in linear-probe points."""
    criteria_transfer = benchmark_module("criteria_transfer")
    rows = [{"objective": "simsiam", "label": "found", "trial": 5, "seed": 0, "linear_backbone": 0.18, "knn_backbone": 0.1,
             "search": {"score_rankme": 0.9, "score_conditioning": 0.1}},
            {"objective": "simsiam", "label": "top_2", "trial": 2, "seed": 0, "linear_backbone": 0.36, "knn_backbone": 0.3,
             "search": {"score_rankme": 0.6, "score_conditioning": 0.8}}]
    published = [{"objective": "simsiam", "label": "published", "trial": None, "seed": s, "linear_backbone": v}
                 for s, v in ((0, 0.30), (1, 0.32))]
    results = {"runs": rows + published}
    by_obj = criteria_transfer.heads(results)
    assert criteria_transfer.picks(results, by_obj, ("rankme",))["simsiam"]["trial"] == 5
    got = criteria_transfer.picks(results, by_obj, ("rankme", "conditioning"))["simsiam"]
    assert got["trial"] == 2 and got["published_mean"] == pytest.approx(0.31)
    assert got["margin_points"] == pytest.approx(5.0)
