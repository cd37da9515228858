"""The training pipeline end to end: every shapes recipe, resume, divergence, bad recipes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from geohead.training.checkpoint import load_checkpoint
from geohead.cli import main
from geohead.training.config import load_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "geohead" / "recipes").glob("*_shapes_cpu.toml"))
SMALL = [
    "data.n_train=256", "data.n_test=128", "optim.batch_size=64", "optim.max_steps=3",
    "probe.n_train=256", "probe.n_test=128", "track.log_every=1", "track.monitor_every=3",
    "track.progress=false", "head.spec.hidden_dim=64",
]


def small_cfg(recipe: Path, out: Path, extra: list[str] = ()):
    return load_recipe(recipe, SMALL + [f'out="{out}"'] + list(extra))


def losses(run: Path) -> dict[int, float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in lines if "loss" in r}


def assert_csv_is_jsonl(run: Path) -> list[dict]:
    """metrics.csv holds metrics.jsonl's records, one row each, every value as written there
    (an empty cell where a record lacks a column); returns the records."""
    import csv

    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records) > 0
    for row, rec in zip(rows, records):
        assert {k: v for k, v in row.items() if v != ""} == {k: str(v) for k, v in rec.items()}, (row, rec)
    return records


def test_six_recipes_exist() -> None:
    assert [p.name.split("_")[0] for p in RECIPES] == ["barlow", "byol", "dino", "simclr", "simsiam", "vicreg"]
    assert len(list((ROOT / "geohead" / "recipes").glob("*_resnet18_cifar10.toml"))) == 6
    assert len(list((ROOT / "geohead" / "recipes").glob("*_vit_tiny_cifar10.toml"))) == 6
    for p in (ROOT / "geohead" / "recipes").glob("*.toml"):
        load_recipe(p)  # every recipe validates


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_shapes_recipe_trains_end_to_end(recipe: Path, tmp_path) -> None:
    from geohead.training.loop import train

    # the linear probes (12 factors x 2 spaces) run for one recipe; kNN for all
    linear = "true" if recipe.stem.startswith("barlow") else "false"
    cfg = small_cfg(recipe, tmp_path / "run", ["track.hessian_every=3", "track.hessian_samples=16",
                                                "track.hessian_iters=8", f"probe.linear={linear}"])
    result = train(cfg)
    run = tmp_path / "run"
    assert result.steps == 3
    for name in ("config.json", "head.json", "metrics.jsonl", "last.safetensors", "probes.json", "summary.json"):
        assert (run / name).is_file(), name
    curve = losses(run)
    assert sorted(curve) == [1, 2, 3] and all(map(lambda v: v == v and abs(v) < 1e6, curve.values()))
    assert any("hessian_lambda_min" in r for r in assert_csv_is_jsonl(run))  # loss, monitor and Hessian rows
    monitors = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"monitor"' in x]
    assert monitors and {"rankme_backbone", "rankme_head", "std_head", "hessian_lambda_min", "m_over_h"} <= set(monitors[-1])
    ck = load_checkpoint(run)
    assert ck.meta["step"] == 3 and ck.meta["objective"] == cfg.objective
    keys = set(ck.tensors)
    assert any(k.startswith("model.backbone.") for k in keys) and any(k.startswith("model.head.") for k in keys)
    assert any(k.startswith("teacher.") for k in keys) == (cfg.objective in ("byol", "dino"))
    assert any(k.startswith("model.predictor.") for k in keys) == (cfg.objective in ("byol", "simsiam"))
    probes = json.loads((run / "probes.json").read_text())
    assert {"class", "hue", "rotation"} <= set(probes["targets"])
    for space in ("backbone", "head"):
        assert 0.0 <= probes["targets"]["class"][space]["knn"] <= 1.0


def test_resume_continues_the_same_loss_curve(tmp_path) -> None:
    """A run stopped at step 2 and resumed (from a last.ckpt, the checkpoint's earlier name) ends
    where the run straight through ends."""
    from geohead.training.loop import train

    recipe = ROOT / "geohead" / "recipes" / "byol_shapes_cpu.toml"  # EMA teacher + predictor: the most state
    extra = ["optim.max_steps=4", "track.ckpt_every=1", "probe.enabled=false"]
    train(small_cfg(recipe, tmp_path / "straight", extra))
    train(small_cfg(recipe, tmp_path / "resumed", ["optim.max_steps=2", "track.ckpt_every=1", "probe.enabled=false"]))
    assert load_checkpoint(tmp_path / "resumed").meta["step"] == 2
    # a folder written before checkpoints were named for their format holds last.ckpt: it resumes too
    (tmp_path / "resumed" / "last.safetensors").rename(tmp_path / "resumed" / "last.ckpt")
    train(small_cfg(recipe, tmp_path / "resumed", extra))  # picks up at step 2
    assert [p.name for p in (tmp_path / "resumed").glob("last.*")] == ["last.safetensors"]  # the old name, superseded, is gone
    assert_csv_is_jsonl(tmp_path / "resumed")  # rebuilt from the lines kept up to the checkpoint, then appended
    a, b = losses(tmp_path / "straight"), losses(tmp_path / "resumed")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert abs(a[step] - b[step]) <= 1e-5 * max(1.0, abs(a[step])), (step, a[step], b[step])
    sa, sb = load_checkpoint(tmp_path / "straight").tensors, load_checkpoint(tmp_path / "resumed").tensors
    assert max(float((sa[k].float() - sb[k].float()).abs().max()) for k in sa if sa[k].numel()) < 1e-4


def test_killed_run_resumes(tmp_path) -> None:
    recipe = ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml"
    out = tmp_path / "run"
    args = [sys.executable, "-m", "geohead.cli", "train", str(recipe), "--out", str(out)]
    sets = [a for s in SMALL + ["optim.epochs=5", "optim.max_steps=20", "track.ckpt_every=1", "probe.enabled=false"] for a in ("--set", s)]
    proc = subprocess.Popen(args + sets, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            if (out / "last.safetensors").exists() and load_checkpoint(out).meta["step"] >= 2:
                break
            assert proc.poll() is None, "the run finished before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    killed_at = load_checkpoint(out).meta["step"]
    assert 2 <= killed_at < 20
    res = subprocess.run(args + sets, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert load_checkpoint(out).meta["step"] == 20
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == list(range(1, 21))  # no duplicated or missing steps


def test_diverging_run_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch) -> None:
    import geohead.training.loop as T

    real = T.ssl_step
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        loss, f, e = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 3 else loss), f, e

    monkeypatch.setattr(T, "ssl_step", poisoned)
    cfg = small_cfg(ROOT / "geohead" / "recipes" / "simclr_shapes_cpu.toml", tmp_path / "run",
                    ["optim.max_steps=5", "track.ckpt_every=1", "probe.enabled=false"])
    with pytest.raises(T.TrainingDiverged, match=r"loss became nan at step 2 .*last good checkpoint .*\(step 2\)"):
        T.train(cfg)
    assert load_checkpoint(tmp_path / "run").meta["step"] == 2
    assert not (tmp_path / "run" / "summary.json").exists()


def test_bad_recipe_fails_before_training(tmp_path) -> None:
    bad = tmp_path / "typo.toml"
    bad.write_text('objective = "barlow"\n[optim]\nlearning_rate = 0.1\n')
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["train", str(bad), "--out", str(out)])
    assert res.exit_code == 2
    assert "unknown key 'optim.learning_rate'" in res.output and "Traceback" not in res.output
    assert not out.exists()
    res = CliRunner().invoke(main, ["train", str(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml"), "--set", "optim.name=adam"])
    assert res.exit_code == 2 and "choose one of ['lars', 'sgd', 'adamw']" in res.output
    res = CliRunner().invoke(main, ["train", str(tmp_path / "missing.toml")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_different_run_in_folder_is_refused(tmp_path) -> None:
    from geohead.training.loop import train

    recipe = ROOT / "geohead" / "recipes" / "vicreg_shapes_cpu.toml"
    train(small_cfg(recipe, tmp_path / "run", ["optim.max_steps=1", "probe.enabled=false"]))
    with pytest.raises(ValueError, match="holds a different run"):
        train(small_cfg(recipe, tmp_path / "run", ["optim.max_steps=1", "probe.enabled=false", "optim.lr=0.01"]))
    train(small_cfg(recipe, tmp_path / "run", ["optim.max_steps=1", "probe.enabled=false", "optim.lr=0.01"]), overwrite=True)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["optim"]["lr"] == 0.01


def test_a_finished_run_is_probed_on_other_test_data_without_training(tmp_path) -> None:
    """The test data is read by the probes alone: a rerun that changes only data.test / data.n_test
    resumes the finished run (metrics.jsonl unchanged: no step trained) and probes it; a change
    to the training data is still refused."""
    from geohead.training.loop import train

    recipe, run = ROOT / "geohead" / "recipes" / "vicreg_shapes_cpu.toml", tmp_path / "run"
    train(small_cfg(recipe, run, ["optim.max_steps=2", "probe.enabled=false"]))
    before = (run / "metrics.jsonl").read_text()
    assert not (run / "probes.json").exists()
    probe = ["optim.max_steps=2", "probe.n_train=64", "probe.n_test=32", "probe.linear=false", "probe.factors=false"]
    train(small_cfg(recipe, run, probe + ["data.n_test=32"]))
    assert (run / "metrics.jsonl").read_text() == before
    probes = json.loads((run / "probes.json").read_text())
    assert probes["split"]["n_test"] == 32 and 0.0 <= probes["targets"]["class"]["backbone"]["knn"] <= 1.0
    with pytest.raises(ValueError, match="holds a different run"):
        train(small_cfg(recipe, run, probe + ["data.n_train=100"]))


def test_tensorboard_events_hold_the_logged_scalars(tmp_path) -> None:
    """track.tensorboard=true: event files in the run folder whose scalars are metrics.jsonl's
    numbers, loss lines under train/, monitor records under geometry/ (GeometryMonitor's tags)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from geohead.training.loop import train

    run = tmp_path / "run"
    train(small_cfg(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml", run,
                    ["optim.max_steps=2", "track.monitor_every=1", "probe.enabled=false", "track.tensorboard=true"]))
    records = assert_csv_is_jsonl(run)
    assert list(run.glob("events.out.tfevents.*"))
    events = EventAccumulator(str(run))
    events.Reload()
    got = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    for tag, key, kind in (("train/loss", "loss", None), ("geometry/rankme_head", "rankme_head", "monitor")):
        want = {r["step"]: r[key] for r in records if r.get("kind") == kind}
        assert sorted(got[tag]) == sorted(want) == [1, 2]
        assert [got[tag][k] for k in sorted(want)] == pytest.approx([want[k] for k in sorted(want)], rel=1e-6)  # float32 in events
    assert "train/lr" in got and "geometry/kind" not in got  # numbers only


def test_tensorboard_without_the_package_is_a_config_error(tmp_path, monkeypatch) -> None:
    """Asked for TensorBoard without the tensorboard package: one line naming it (exit 2), before
    anything is trained."""
    import importlib.util

    from geohead.training.config import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    recipe = ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml"
    with pytest.raises(ConfigError, match="track.tensorboard = true needs the tensorboard package"):
        load_recipe(recipe, ["track.tensorboard=true"])
    assert load_recipe(recipe).track.tensorboard is False  # off by default: nothing to import
    res = CliRunner().invoke(main, ["train", str(recipe), "--set", "track.tensorboard=true", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "pip install tensorboard" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "run").exists()
