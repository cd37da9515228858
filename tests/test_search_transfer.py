"""benchmarks/search_transfer.py at smoke scale (15-40 s on 2 cores): the pipeline from search to full-budget table."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("tiny_whitening")


def test_transfer_benchmark_at_smoke_scale(tmp_path, shared_data) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import search_transfer
    finally:
        sys.path.pop(0)
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
    # a rerun reuses the search and every finished run
    before = (out / "barlow" / "search" / "search.json").stat().st_mtime
    assert search_transfer.main(["--scale", "smoke", "--data-dir", str(shared_data), "--out", str(out)]) == 0
    assert (out / "barlow" / "search" / "search.json").stat().st_mtime == before
    assert json.loads((out / "results.json").read_text())["runs"][0]["wall_s"] == res["runs"][0]["wall_s"]
