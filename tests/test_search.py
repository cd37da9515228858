"""geohead search end to end on tiny settings: outputs, resume, divergence, a killed worker."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from geohead.heads import GeometricHead, HeadSpec
from geohead.search import SearchConfig, run_search
from geohead.search.outputs import read_trials_csv
from geohead.search.space import DIMENSIONS

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_whitening")
ROOT = Path(__file__).resolve().parents[1]
#: A search that takes ~2 s per trial on one CPU thread.
TINY = dict(n_train=256, batch_size=64, steps=2, probe_train=128, probe_test=64, orbit_images=8, families=("hue",),
            screen_batch=64, timeout=None, progress=False, heartbeat=2)


def tiny(out: Path, **kw) -> SearchConfig:
    return SearchConfig(out=str(out), **{**TINY, **kw})


def load(out: Path, name: str = "barlow-shapes-default"):
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'study.db'}")


def test_three_trials_write_every_output_and_a_rerun_resumes(tmp_path) -> None:
    out = tmp_path / "search"
    res = run_search(tiny(out, trials=3))
    for name in ("best_head.json", "trials.csv", "rungs.csv", "search.json", "table.txt", "study.db",
                 "criteria_vs_knn.png", "pareto_front.png", "param_importances.png"):
        assert (out / name).is_file(), name
    rows = read_trials_csv(out / "trials.csv")
    assert [r["number"] for r in rows] == [0, 1, 2]
    assert all(r["state"] in ("COMPLETE", "PRUNED") for r in rows)
    done = [r for r in rows if r["state"] == "COMPLETE"]
    assert done, rows
    for r in done:
        for col in (*DIMENSIONS, "score", "knn_backbone", "knn_head", "rankme_backbone", "compression", "heff_condition",
                    "screen_escape_lambda_min", "screen_heff_condition", "screen_fisher_rank_loss", "seed", "worker"):
            assert r.get(col) is not None, col
        assert r["seed"] == 0 and 0.0 <= r["knn_backbone"] <= 1.0 and r["value"] == pytest.approx(r["score"])
    # pick_head.json is the best trial's spec and builds a head; geohead train --head reads it
    # (best_head.json is the verdict's choice: tests/test_search_verdict.py)
    summary = json.loads((out / "search.json").read_text())
    best = max(done, key=lambda r: r["score"])
    assert summary["best"]["number"] == best["number"]
    spec = HeadSpec.load(out / "pick_head.json")
    assert spec.depth == best["depth"] and spec.out_dim == best["out_dim"] and spec.in_dim == 128
    head = GeometricHead.from_spec(out / "pick_head.json")
    assert head(torch.randn(4, 128)).shape[1] == spec.output_dim
    from geohead.training.config import load_recipe

    cfg = load_recipe(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml", [f'head.file="{out / "pick_head.json"}"'])
    assert cfg.head.resolve("barlow", 128) == spec
    assert summary["plots"] == ["criteria_vs_knn.png", "pareto_front.png", "param_importances.png"]
    assert summary["spearman"]["n"] == len(done) and set(summary["trials"]) >= {"complete", "pruned", "failed"}
    assert "Spearman" in res.table and "top heads" in res.table
    # every scored head has a rank: the score at the highest rung it shares with the others
    from geohead.search.results import rank_heads

    rungs = read_trials_csv(out / "rungs.csv")
    scores = {r["number"]: {g["step"]: g["score"] for g in rungs if g["number"] == r["number"]} for r in rows}
    for r in done:
        scores[r["number"]][r["steps_trained"]] = r["score"]
    assert [r["rank"] for r in sorted(rows, key=lambda r: r["rank"])] == list(range(1, len(rows) + 1))
    assert [r["number"] for r in sorted(rows, key=lambda r: r["rank"])] == rank_heads(scores)
    # the proxy the heads were measured on is recorded beside the pick and printed with what to re-check
    from geohead.heads import read_found_on

    proxy = read_found_on(out / "best_head.json")
    assert proxy == summary["proxy"] == read_found_on(out / "pick_head.json")
    assert proxy["backbone"] == "resnet18_w16" and proxy["d"] == 128 and proxy["objective"] == "barlow"
    assert proxy["steps"] == max(r["steps_trained"] for r in done) and proxy["n_train"] > 0
    from geohead.search.ladder import recheck

    assert f"decided on: resnet18_w16 (d=128), {proxy['steps']} steps" in res.table and recheck("barlow") in res.table
    # Barlow Twins: Thm 4.1's premise fails, the escape criterion is off and the output says why
    assert summary["escape_criterion"]["on"] is False and "premise fails there: its Hessian" in summary["escape_criterion"]["reason"]
    assert "escape criterion OFF: not needed for barlow (not a fault): Thm 4.1's premise fails there: its Hessian is indefinite" in res.table
    assert all(r["constraint"] == 0 for r in rows if r["state"] == "COMPLETE")

    # the same command again: the study already holds 3 finished trials, nothing runs
    before = load(out).trials
    run_search(tiny(out, trials=3))
    after = load(out).trials
    assert [(t.number, t.datetime_start, t.state) for t in after] == [(t.number, t.datetime_start, t.state) for t in before]
    # a larger target runs only the missing trial; the finished ones are not repeated
    run_search(tiny(out, trials=4))
    again = load(out).trials
    measured = [t for t in again if "duplicate_of" not in t.user_attrs]  # a repeat of a head is not counted
    assert len(measured) == 4 and [t.datetime_start for t in again[:3]] == [t.datetime_start for t in before]
    assert len(read_trials_csv(out / "trials.csv")) == len(again)

    # other settings cannot silently join the study
    from geohead.search import SearchError

    with pytest.raises(SearchError, match=r"made with other settings \(min_steps: stored 2 vs now 3, max_steps: stored 2 vs now 3\)"):
        run_search(tiny(out, trials=4, steps=3))


def test_a_trial_that_diverges_or_errs_fails_and_the_study_goes_on(tmp_path, monkeypatch, capfd) -> None:
    import geohead.search.trial as TR
    import geohead.training.loop as T

    real_train, real_step, real_crit = T.train, T.ssl_step, TR.trained_criteria
    calls = []

    def nan_step(*args, **kwargs):
        loss, f, e = real_step(*args, **kwargs)
        return loss * float("nan"), f, e

    def train(cfg, *args, **kwargs):  # the first trial's loss is NaN from its first step
        calls.append(cfg.out)
        monkeypatch.setattr(T, "ssl_step", nan_step if len(calls) == 1 else real_step)
        return real_train(cfg, *args, **kwargs)

    def criteria(*args, **kwargs):  # the second trial's measurement raises
        if len(calls) == 2:
            raise RuntimeError("boom")
        return real_crit(*args, **kwargs)

    monkeypatch.setattr(T, "train", train)
    monkeypatch.setattr(TR, "trained_criteria", criteria)
    out = tmp_path / "search"
    run_search(tiny(out, trials=4, prune=False))
    rows = read_trials_csv(out / "trials.csv")
    assert [r["state"] for r in rows] == ["FAIL", "FAIL", "COMPLETE", "COMPLETE"] and len(calls) == 4
    assert "diverged" in rows[0]["fail_reason"] and "loss became nan" in rows[0]["fail_reason"]
    assert rows[1]["fail_reason"] == "RuntimeError: boom"
    # each failure in the search's own line (an unexpected error with its traceback, for a report),
    # without Optuna's two records of it
    err = capfd.readouterr().err
    assert "failed with parameters" not in err and "failed with value" not in err, err
    assert "trial 0 FAIL (diverged" in err and err.count("Traceback") == 1 and "trial 1 FAIL (RuntimeError: boom)" in err
    summary = json.loads((out / "search.json").read_text())
    assert summary["trials"]["failed"] == 2 and summary["best"]["number"] in (2, 3)


def test_a_repeated_head_is_not_trained_not_counted_and_the_sampler_moves_on(tmp_path) -> None:
    import optuna

    from geohead.heads import preset_spec
    from geohead.search.reference import enqueue_reference, published_spec
    from geohead.search.space import SearchSpace

    out = tmp_path / "search"
    out.mkdir()
    study = optuna.create_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}",
                                direction="maximize")
    space = SearchSpace.default(128)
    # the published head first (the search enqueues it only when the study has none), then a head twice
    assert enqueue_reference(study, space, published_spec("barlow", preset_spec("barlow", 128), space))
    head = {"depth": 1, "out_dim": 64, "last_norm": "none", "whiten": "none"}
    study.enqueue_trial(head)
    study.enqueue_trial(head)
    run_search(tiny(out, trials=3, confirm_seeds=0))
    ref, t0, t1, t2 = load(out).trials
    assert ref.user_attrs["reference"] == "published" and ref.state.name == "COMPLETE"
    assert t0.state.name == "COMPLETE" and "duplicate_of" not in t0.user_attrs
    # the repeat: PRUNED without a value (TPE ranks it among the worst), not trained, not counted
    assert t1.state.name == "PRUNED" and t1.user_attrs["duplicate_of"] == 1 and not t1.intermediate_values
    assert not (out / "trials" / "0002").exists()
    # the next trial measures an unmeasured neighbour of the repeated head: one dimension changed
    assert t2.user_attrs["steered_from"] == 2 and t2.state.name in ("COMPLETE", "PRUNED")
    p0, p2 = (space.params_of(HeadSpec.from_dict(t.user_attrs["head"])) for t in (t0, t2))
    changed = [k for k in DIMENSIONS if p0.get(k) != p2.get(k)]
    assert changed and (len(changed) == 1 or "depth" in changed), (p0, p2)
    summary = json.loads((out / "search.json").read_text())
    assert summary["trials"]["duplicates"] == 1 and summary["trials"]["done"] == 3
    rows = read_trials_csv(out / "trials.csv")
    assert rows[2]["duplicate_of"] == 1 and "repeats the head of trial 1" in rows[2]["pruned_by"]


def test_the_search_ends_when_the_space_is_exhausted(tmp_path) -> None:
    out = tmp_path / "search"
    # a space of 2 heads: 1 layer, 32 outputs, no last norm, whitening none or pca
    cfg = tiny(out, trials=10, fix=("depth=1", "out_dim=32", "last_norm=none"), ranges=("whiten=none,pca",))
    res = run_search(cfg)
    assert res.summary["stopped_by"] == "space" and res.summary["trials"]["done"] == 2
    heads = {json.dumps(t.user_attrs["head"], sort_keys=True) for t in load(out).trials if "duplicate_of" not in t.user_attrs}
    assert len(heads) == 2
    assert "every head of the space was measured" in res.table


def test_a_killed_worker_leaves_a_sound_storage_and_its_trial_is_retried(tmp_path) -> None:
    out = tmp_path / "search"
    cfg = tiny(out, trials=1, steps=30, heartbeat=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "workers" / "search_worker.py"),
                             json.dumps(dataclasses.asdict(cfg))], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    marker = out / "trials" / "0000" / "config.json"  # train() writes it before the first step
    t0 = time.time()
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() - t0 < 180, "the worker never started a trial"
        time.sleep(0.1)
    time.sleep(1.5)  # a few (slowed) steps into training
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    db = sqlite3.connect(out / "study.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    killed = load(out).trials
    assert [t.state.name for t in killed] == ["RUNNING"]
    params = killed[0].params

    time.sleep(3.5)  # past the grace period (3 heartbeats of 1 s): the trial is now stale
    run_search(cfg)
    trials = load(out).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].params == params and trials[1].user_attrs["retry_of"] == 0
    rows = read_trials_csv(out / "trials.csv")
    assert rows[1]["retry_of"] == 0 and rows[1]["worker"] != killed[0].user_attrs["worker"]
    summary = json.loads((out / "search.json").read_text())
    assert summary["best"]["number"] == 1 and summary["trials"]["complete"] == 1


def test_theory_score_is_what_optuna_maximises_and_search_json_names_its_weights(tmp_path) -> None:
    """The default score (theory): each completed trial's value is the mean of RankMe's, H_eff
    conditioning's and the tangent-Fisher effective rank's [0, 1] transforms of
    the criteria the trial recorded (the formulas of docs/search.md), and search.json names those
    weights."""
    import math

    from geohead.search.score import THEORY_WEIGHTS

    out = tmp_path / "search"
    run_search(tiny(out, trials=2))                      # no --score: the default
    done = [r for r in read_trials_csv(out / "trials.csv") if r["state"] == "COMPLETE"]
    assert done
    for r in done:
        d = r["dim_backbone"]
        parts = [min(1.0, max(0.0, math.log(r["rankme_backbone"]) / math.log(d))), min(1.0, max(0.0, r["heff_spread"])),
                 math.log1p(r["fisher_effective_rank"]) / math.log1p(d)]
        assert r["value"] == pytest.approx(sum(parts) / 3, rel=1e-9) and r["score"] == pytest.approx(r["value"])
        assert r["value"] != pytest.approx(r["score_rankme"])  # not --score geometry (RankMe alone)
    summary = json.loads((out / "search.json").read_text())
    assert summary["score"] == "theory" and summary["score_weights"] == THEORY_WEIGHTS


def test_a_running_trial_that_never_sent_a_heartbeat_is_not_waited_for(tmp_path) -> None:
    """Another program's RUNNING trial in the study (no heartbeat record): Optuna's stale check
    never fails it, so the search counts it as neither running nor done and trains its target."""
    import optuna

    out = tmp_path / "search"
    cfg = tiny(out, trials=1, heartbeat=1)
    run_search(cfg)
    plain = optuna.load_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}")
    plain.ask()  # RUNNING, no heartbeat: this storage has none
    time.sleep(3.5)  # past the grace period (3 heartbeats of 1 s)
    run_search(dataclasses.replace(cfg, trials=2, timeout=30))  # waiting for the silent trial ends at the timeout
    trials = load(out).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "RUNNING", "COMPLETE"]
    summary = json.loads((out / "search.json").read_text())
    assert summary["stopped_by"] == "target" and summary["trials"]["complete"] == 2
