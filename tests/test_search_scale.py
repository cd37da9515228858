"""benchmarks/search_scale.py, the proxy-to-real ladder, on tiny synthetic CIFAR-layout files."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import benchmark_module, tiny_cifar_files

pytestmark = pytest.mark.usefixtures("one_thread")

FOUND = {"spec": {"out_dim": 512, "hidden_dim": 512, "depth": 1, "activation": "identity", "norm": None, "bias": "auto",
                  "last_norm": "batch", "whiten": None, "prototypes": None, "freeze_prototype_norm": True}}
PUBLISHED = {"preset": "barlow", "smooth": False, "spec": {"hidden_dim": 512, "out_dim": 512}}


@pytest.fixture(scope="module")
def scale():
    return benchmark_module("search_scale")


def _data(folder: Path) -> Path:
    return tiny_cifar_files(folder, 512, 100)


def _transfer(path: Path) -> Path:
    runs = [{"objective": "barlow", "label": lab, "seed": s, "head": head, "desc": lab, "knn_backbone": k,
             "linear_backbone": k + 0.05} for lab, head, k in (("found", FOUND, 0.36), ("published", PUBLISHED, 0.34))
            for s in (0, 1)]
    path.write_text(json.dumps({"settings": {}, "runs": runs}))
    return path


def test_both_heads_move_to_the_wider_backbone_by_the_same_rule(scale):
    head, desc = scale.scaled_head("barlow", PUBLISHED, 512)
    assert head == {"preset": "barlow", "smooth": False, "spec": {"hidden_dim": 2048, "out_dim": 2048}}
    assert "depth 3 512->2048->2048 relu" in desc
    head, desc = scale.scaled_head("barlow", FOUND, 256)
    assert head["spec"]["out_dim"] == 1024 and desc == "linear 256->1024 last_norm=batch whiten=none"


def test_margins_pair_heads_per_axis_and_seed_and_a_search_axis_meets_its_axis_published_head(scale):
    def run(axis, label, seed, lin, knn, d=256):
        return {"objective": "barlow", "axis": axis, "label": label, "seed": seed, "d": d, "n_train": 10000, "epochs": 20,
                "linear_backbone": lin, "knn_backbone": knn}

    rows = scale.margins([run("width_w32", "found", 0, 0.44, 0.39), run("width_w32", "published", 0, 0.42, 0.40),
                          run("search_w32", "found", 0, 0.45, 0.41), run("width_w32", "found", 1, 0.43, 0.38),
                          run("data_40k", "published", 1, 0.47, 0.44, d=128), run("search_40k", "found", 1, 0.46, 0.45, d=128)])
    by = {(r["axis"], r["seed"]): r for r in rows}
    assert set(by) == {("width_w32", 0), ("search_w32", 0), ("search_40k", 1)}  # width_w32 seed 1 lacks its published run
    assert by[("width_w32", 0)]["margin_linear"] == pytest.approx(2.0)
    assert by[("width_w32", 0)]["margin_knn"] == pytest.approx(-1.0)
    assert by[("search_w32", 0)]["margin_linear"] == pytest.approx(3.0)
    assert by[("search_40k", 1)]["margin_linear"] == pytest.approx(-1.0)
    assert by[("search_40k", 1)]["margin_knn"] == pytest.approx(1.0)


def test_a_search_axis_searches_on_its_own_backbone_and_data_and_trains_its_pick_there(scale, tmp_path, monkeypatch):
    from geohead.heads import HeadSpec

    data = _data(tmp_path)
    for name in scale.TRAIN_FILES["40k"][1:]:
        (data / name).write_bytes((data / "cifar10_train_10k.npz").read_bytes())
    monkeypatch.setattr(scale.tempfile, "gettempdir", lambda: str(tmp_path))
    seen = []

    def fake_search(objective, out, data, seed, scale_, timeout, backbone, trials=None, **settings):
        seen.append((out.name, np.load(data["train"])["images"].shape[0], backbone, seed, trials, settings))
        folder = out / objective / "search"
        folder.mkdir(parents=True, exist_ok=True)
        HeadSpec(in_dim=128, out_dim=256, hidden_dim=256, depth=2, activation="gelu").to_json(folder / "best_head.json")
        return folder

    monkeypatch.setattr(scale.st, "run_the_search", fake_search)
    args = argparse.Namespace(data_dir=str(data), out=str(tmp_path / "o"), epochs=None, n_test=None, device="cpu",
                              search_trials=9)
    cfg, head, desc = scale.run_config(args, "search_40k", "barlow", "found", 1, {"runs": []})
    assert seen == [("search_40k", 4 * 512, "resnet18_w16", 0, 9, {"score": "theory"})]
    assert (cfg.backbone.name, cfg.seed, desc) == ("resnet18_w16", 1, "depth 2 128->256->256 gelu norm=batch last_norm=none whiten=none")
    assert head["spec"]["hidden_dim"] == 256 and np.load(cfg.data.name)["images"].shape[0] == 4 * 512
    # the pick is the head a data_40k run trained at this seed: that run's record, nothing trained
    twin = {"objective": "barlow", "axis": "data_40k", "label": "found", "seed": 1, "head": head, "epochs": 20,
            "backbone": "resnet18_w16", "n_train": 40_000, "device": "cpu", "knn_backbone": 0.43, "linear_backbone": 0.47}
    rec = scale.train_run(args, "search_40k", "barlow", "found", 1, {"runs": []}, [twin])
    assert rec == {**twin, "axis": "search_40k", "desc": desc, "same_run_as": "data_40k found seed 1"}
    assert len(seen) == 2 and not (tmp_path / "o" / "search_40k" / "barlow" / "found_s1").exists()
    assert scale.plan(argparse.Namespace(axes=["search_40k", "data_40k"], seeds=[0], objective=["barlow"])) == [
        ("search_40k", "barlow", "found", 0), ("data_40k", "barlow", "found", 0), ("data_40k", "barlow", "published", 0)]


def test_the_gpu_version_is_full_width_100_epochs_bf16(scale, tmp_path):
    data = _data(tmp_path)
    args = argparse.Namespace(data_dir=str(data), out=str(tmp_path / "o"), epochs=100, n_test=None, device="cuda",
                              search_trials=9)
    transfer = json.loads(_transfer(tmp_path / "t.json").read_text())
    cfg, _, desc = scale.run_config(args, "width_full", "barlow", "found", 0, transfer)
    assert (cfg.device, cfg.precision, cfg.backbone.name) == ("cuda", "bf16", "resnet18_cifar")
    assert cfg.optim.max_steps == 100 * (512 // 256) and desc == "linear 512->2048 last_norm=batch whiten=none"


def test_a_ladder_run_writes_results_after_each_run_and_a_rerun_trains_nothing(scale, tmp_path, capsys):
    data, out = _data(tmp_path), tmp_path / "ladder"
    argv = ["--transfer", str(_transfer(tmp_path / "t.json")), "--objective", "barlow", "--axes", "width_w32",
            "--seeds", "0", "--epochs", "1", "--data-dir", str(data), "--out", str(out),
            "--results", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png"), "--ladder", str(tmp_path / "l.json")]
    assert scale.main(argv) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    assert [(r["axis"], r["label"], r["d"], r["steps"]) for r in res["runs"]] == [
        ("width_w32", "found", 256, 2), ("width_w32", "published", 256, 2)]
    for r in res["runs"]:
        assert 0.0 <= r["knn_backbone"] <= 1.0 and r["backbone"] == "resnet18_w32" and r["n_train"] == 10000
    axes = {(m["axis"], m["seed"]) for m in res["margins"]}
    assert ("width_w32", 0) in axes and ("proxy", 1) in axes and (tmp_path / "p.png").stat().st_size > 0
    capsys.readouterr()
    assert scale.main(argv) == 0
    assert "backbone kNN" not in capsys.readouterr().out  # every point was read back, none trained
    ladder = json.loads((tmp_path / "l.json").read_text())["objectives"]["barlow"]
    assert set(ladder["axes"]) >= {"width"} and ladder["axes"]["width"]["seeds"] == [0]
    w = next(m for m in res["margins"] if m["axis"] == "width_w32")
    assert ladder["axes"]["width"]["knn_margin"] == round(100 * (w["pick_knn"] - w["pub_knn"]), 2)
    assert ladder["axes"]["width"]["margin"] == round(100 * (w["pick_linear"] - w["pub_linear"]), 2)
    assert argv[argv.index("--data-dir") + 1] == str(data)
    argv[argv.index("--data-dir") + 1] = str(tmp_path / "nowhere")
    assert scale.main(argv) == 2


def test_a_sitting_on_one_objective_keeps_the_others_in_the_ladder(scale, tmp_path):
    def run(o, axis, label, lin):
        return {"objective": o, "axis": axis, "label": label, "seed": 0, "d": 128, "n_train": 40_000, "epochs": 20,
                "linear_backbone": lin, "knn_backbone": lin - 0.05, "desc": label}

    transfer = {"runs": [{**run(o, "proxy", lab, v), "n_train": 10_000} for o in ("barlow", "simclr")
                         for lab, v in (("found", 0.42), ("published", 0.40))]}
    runs = [run(o, "data_40k", lab, v) for o in ("barlow", "simclr") for lab, v in (("found", 0.47), ("published", 0.46))]
    args = argparse.Namespace(objective=["barlow"], results=str(tmp_path / "r.json"), out=str(tmp_path / "o"), plot="",
                              ladder=str(tmp_path / "l.json"))
    scale.write(args, runs, transfer, None)
    ladder = json.loads((tmp_path / "l.json").read_text())["objectives"]
    assert set(ladder) == {"barlow", "simclr"} and ladder["simclr"]["axes"]["data"]["margin"] == pytest.approx(1.0)
    assert ladder["simclr"]["proxy"]["margin"] == pytest.approx(2.0)


def test_with_criteria_each_new_run_records_what_a_verdict_on_its_backbone_compares(scale, tmp_path):
    data, out = _data(tmp_path), tmp_path / "ladder"
    search = tmp_path / "searches" / "barlow" / "search"
    search.mkdir(parents=True)
    settings = {"objective": "barlow", "data": str(data / "cifar10_train_10k.npz"), "test": str(data / "cifar10_test.npz"),
                "n_train": 256, "batch_size": 64, "probe_train": 128, "probe_test": 64, "orbit_images": 8,
                "families": ["hue"], "screen_batch": 64, "seed": 2, "score": "theory"}
    (search / "search.json").write_text(json.dumps({"settings": settings}))
    argv = ["--transfer", str(_transfer(tmp_path / "t.json")), "--objective", "barlow", "--axes", "width_w32",
            "--seeds", "0", "--epochs", "1", "--data-dir", str(data), "--out", str(out), "--results", str(tmp_path / "r.json"),
            "--plot", "", "--ladder", "", "--criteria", str(tmp_path / "searches")]
    assert scale.main(argv) == 0
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    rc = benchmark_module("run_criteria")
    for r in runs:
        assert set(r["criteria"]) == set(rc.KEYS) and 0.0 <= r["criteria"]["score"] <= 1.0
        assert not (out / "width_w32" / "barlow" / f"{r['label']}_s0" / "last.safetensors").exists()
    runner = scale._RUNNERS["barlow", "resnet18_w32"]                  # measured on the run's backbone, d = 256
    assert runner.inputs.in_dim == 256 and runner.cfg.probe_test == 64 and runner.cfg.seed == 2


def test_pairs_that_recorded_criteria_give_the_verdict_a_confirm_backbone_search_would_reach(scale):
    def run(label, seed, lin, score, probe_knn):
        return {"objective": "barlow", "axis": "width_full", "label": label, "seed": seed, "d": 512, "n_train": 10000,
                "epochs": 20, "linear_backbone": lin, "knn_backbone": lin - 0.05,
                "criteria": {"score": score, "knn_backbone": probe_knn}}

    runs = [run("found", 0, 0.48, 0.60, 0.40), run("published", 0, 0.51, 0.50, 0.45),
            run("found", 1, 0.47, 0.62, 0.41), run("published", 1, 0.50, 0.50, 0.44)]
    rows = scale.margins(runs)
    assert [r["margin_score"] for r in rows] == pytest.approx([0.10, 0.12])
    assert [r["margin_probe_knn"] for r in rows] == pytest.approx([-5.0, -3.0])
    # score diffs 0.10, 0.12: mean 0.11, sd 0.01 * sqrt(2), noise sd / sqrt(2) = 0.01, beyond 2 noise;
    # kNN diffs -5, -3 points: mean -4, noise 1: the score's margin is vetoed by the lower kNN
    (v,) = scale.verdicts(rows)
    assert (v["recommended"], v["basis"], v["seeds"]) == ("published", "kNN lower", [0, 1])
    assert (v["score_margin"], v["score_noise"]) == pytest.approx((0.11, 0.01))
    assert (v["knn_margin"], v["knn_noise"]) == pytest.approx((-4.0, 1.0))
    assert v["test_linear_margin"] == pytest.approx(-3.0)
    text = scale.table(rows, runs)
    assert "| barlow | width_full | 1 | +0.120 | -3.0 | -3.0 |" in text
    assert "verdict on barlow width_full at seeds 0, 1: published (kNN lower; score +0.110" in text
    # one seed measured, or a pair without criteria: a reading, no verdict
    assert scale.verdicts(scale.margins(runs[:2])) == []
    unmeasured = {k: v for k, v in runs[0].items() if k != "criteria"}
    assert "margin_score" not in scale.margins([unmeasured, runs[1]])[0]


def test_the_ladder_keeps_each_seeds_linear_margin_beside_the_mean(scale):
    def row(axis, seed, lin, knn, d=128):
        return {"objective": "simclr", "axis": axis, "seed": seed, "d": d, "n_train": 10_000, "epochs": 20,
                "margin_linear": lin, "margin_knn": knn}

    rows = [row("proxy", 0, 2.5, 2.1), row("proxy", 1, 2.6, 2.2),   # seeds out of order at the far end
            row("width_full", 1, 3.27, 2.25, 512), row("width_full", 0, 0.06, 1.85, 512), row("width_w32", 0, 0.9, 0.0, 256)]
    record = scale.ladder_record(rows)
    width = record["objectives"]["simclr"]["axes"]["width"]
    assert width == {"at": "d=512", "margin": 1.67, "knn_margin": 2.05, "seeds": [0, 1], "seed_margins": [0.06, 3.27]}
    from geohead.search.ladder import findings
    phrase = findings("simclr", record)["width"]
    assert phrase == ("holds", "width (d=512): +1.7 points, proxy +2.5: holds; kNN +2.0, proxy +2.1: holds "
                               "(seeds 0, 1: linear +0.1 / +3.3)")
