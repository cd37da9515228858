"""benchmarks/verdict_schedule.py: a stored search resumed with its verdict at another schedule,
beside its own verdict and the scale ladder's runs at that budget."""
from __future__ import annotations

import json

import pytest
from conftest import benchmark_module

from geohead.search import SearchConfig, run_search

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_whitening")
TINY = dict(n_train=256, batch_size=64, probe_train=128, probe_test=64, orbit_images=8, families=("hue",),
            screen_batch=64, timeout=None, progress=False, heartbeat=2)


def test_the_ladder_margins_are_pick_minus_published_per_seed(tmp_path) -> None:
    run = dict(objective="barlow", epochs=300, backbone="resnet18_w16", n_train=10_000)
    runs = [dict(run, label="found", seed=0, linear_backbone=0.5108, knn_backbone=0.476),
            dict(run, label="published", seed=0, linear_backbone=0.5186, knn_backbone=0.4767),
            dict(run, label="found", seed=1, linear_backbone=0.50, knn_backbone=0.47),       # no pair: left out
            dict(run, label="found", seed=0, epochs=20, linear_backbone=0.4, knn_backbone=0.4)]
    path = tmp_path / "ladder.json"
    path.write_text(json.dumps({"runs": runs}))
    [row] = benchmark_module("verdict_schedule").ladder_runs(path, "barlow", 300)
    assert row["seed"] == 0 and row["linear"] == pytest.approx(-0.78) and row["knn"] == pytest.approx(-0.07)


def test_a_stored_search_resumes_with_no_new_trial_and_its_verdict_at_the_schedule(tmp_path) -> None:
    import optuna

    search = tmp_path / "search"
    run_search(SearchConfig(out=str(search), trials=3, steps=2, confirm_seeds=1, **TINY))
    stored = json.loads((search / "search.json").read_text())
    results, out = tmp_path / "r.json", tmp_path / "long"
    bench = benchmark_module("verdict_schedule")
    assert bench.main(["--search", str(search), "--out", str(out), "--confirm-epochs", "1", "--confirm-seeds", "2",
                       "--ladder", str(tmp_path / "absent.json"), "--results", str(results)]) == 0
    rec = json.loads(results.read_text())
    assert rec["verdict_short"] == stored["verdict"] and rec["ladder"] == []
    assert rec["verdict_long"]["steps"] == 256 // 64 and set(rec["verdict_long"]["values"]["pick"]) == {"1", "2"}
    study = optuna.load_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}")
    assert len(study.trials) == len(optuna.load_study(study_name="barlow-shapes-default",
                                                      storage=f"sqlite:///{search / 'study.db'}").trials)


def test_the_verdict_on_another_backbone_sits_beside_the_ladders_runs_there(tmp_path) -> None:
    search = tmp_path / "search"
    run_search(SearchConfig(out=str(search), trials=3, steps=2, confirm_seeds=1, **TINY))
    run = dict(objective="barlow", epochs=1, n_train=256, label="found", seed=1, linear_backbone=0.5, knn_backbone=0.5)
    ladder = tmp_path / "ladder.json"
    ladder.write_text(json.dumps({"runs": [dict(run, backbone="resnet18_w32"), dict(run, backbone="resnet18_w32",
                                           label="published", linear_backbone=0.4), dict(run, backbone="resnet18_w16")]}))
    results = tmp_path / "r.json"
    assert benchmark_module("verdict_schedule").main([
        "--search", str(search), "--out", str(tmp_path / "wide"), "--confirm-epochs", "1", "--confirm-seeds", "2",
        "--confirm-backbone", "resnet18_w32", "--ladder", str(ladder), "--results", str(results)]) == 0
    rec = json.loads(results.read_text())
    assert rec["verdict_long"]["backbone"] == "resnet18_w32" and rec["confirm_backbone"] == "resnet18_w32"
    assert [(r["seed"], round(r["linear"], 6)) for r in rec["ladder"]] == [(1, 10.0)]   # the w32 pair, not the w16 run
