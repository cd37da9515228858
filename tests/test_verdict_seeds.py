"""benchmarks/verdict_seeds.py --report-only: it reads a search's stored confirmation runs, decides
with each model and counts right decisions against the 20-epoch truth (no training)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import benchmark_module


# DINO's measured search (benchmarks/results/verdict_seeds_cpu.json, rounded): seed 0 is the study's.
SCORE = {"pick": {0: 0.7330, 1: 0.7529, 2: 0.7572, 3: 0.7213}, "published": {0: 0.7299, 1: 0.7493, 2: 0.7560, 3: 0.7224}}
KNN = {"pick": {0: 0.2010, 1: 0.2000, 2: 0.2085, 3: 0.2180}, "published": {0: 0.2005, 1: 0.1905, 2: 0.2010, 3: 0.2090}}


def _bench():
    return benchmark_module("verdict_seeds")


def _search_folder(root: Path) -> Path:
    """A finished search as the verdict leaves it: search.json (the study's seed in ``verdict``)
    and confirm/<label>_s<seed>/result.json for seeds 1-3."""
    folder = root / "search"
    verdict = {"values": {k: {"0": by[0]} for k, by in SCORE.items()}, "knn": {k: {"0": by[0]} for k, by in KNN.items()}}
    folder.mkdir(parents=True)
    (folder / "search.json").write_text(json.dumps({"objective": "dino", "settings": {"seed": 0, "score": "geometry"},
                                                     "verdict": verdict}))
    for label in ("pick", "published"):
        for seed in (1, 2, 3):
            run = folder / "confirm" / f"{label}_s{seed}"
            run.mkdir(parents=True)
            (run / "result.json").write_text(json.dumps({"value": SCORE[label][seed], "knn_backbone": KNN[label][seed]}))
    truth = root / "transfer.json"
    truth.write_text(json.dumps({"summaries": [{"objective": "dino", "found_minus_published_linear_points": 2.755}]}))
    return folder


def test_report_reads_the_stored_runs_and_decides_with_each_model(tmp_path) -> None:
    vs = _bench()
    folder = _search_folder(tmp_path)
    out = tmp_path / "res.json"
    assert vs.main(["--report-only", "--case", f"dino={folder}={tmp_path / 'transfer.json'}", "--results", str(out)]) == 0
    row = json.loads(out.read_text())["cases"][0]
    assert row["truth_linear_points"] == 2.755 and row["all_seeds"]["seeds"] == [1, 2, 3]
    # the baseline by hand at the first fresh seed: one head's spread, pooled over both heads
    sigma = math.sqrt(((0.7330 - 0.7529) ** 2 + (0.7299 - 0.7493) ** 2) / 4)
    first = row["first_seed"]
    assert first["pooled"]["noise"] == pytest.approx(sigma * math.sqrt(2)) and not first["pooled"]["pick"]
    assert first["paired_score"]["pick"] and not first["paired_knn"]["pick"]
    assert first["verdict"] == {"basis": "score", "margin": pytest.approx(0.0095), "noise": pytest.approx(0.0064, abs=1e-4),
                                "pick": True}
    assert row["all_seeds"]["verdict"]["basis"] == "kNN" and row["later_seeds"]["seeds"] == [2, 3]
    table = vs.table([row])
    assert "| dino | +2.8 | pub · pub · pub | pick · pub · pub | pub · pick · pick | pick · pick · pick |" in table
    assert table.splitlines()[-1] == "| right (decisive cases) | | 0/3 | 1/3 | 2/3 | 3/3 |"


def test_a_truth_between_the_thresholds_counts_either_way() -> None:
    right = _bench().right
    assert right(True, 2.8) is True and right(False, 2.8) is False
    assert right(False, -2.0) is True and right(True, -0.3) is False
    assert right(True, 0.55) is None and right(False, None) is None
