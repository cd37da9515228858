"""geohead diagnose: every number equals what the library call gives on the same inputs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from geohead.training.checkpoint import load_checkpoint
from geohead.cli import main
from geohead.diagnose import DiagnoseSettings, fmt
from tiny_runs import tiny_run

FAST = ["--mode", "fast", "--n-test", "48", "--n-train", "64", "--orbit-images", "4", "--hessian-samples", "8",
        "--collapse-batch", "6", "--no-linear", "--seed", "3"]


@pytest.fixture(scope="module")
def byol_run(tmp_path_factory) -> Path:
    """BYOL (predictor + EMA teacher: every branch of the composition) on the ResNet-18/4."""
    return tiny_run(tmp_path_factory, "byol")


def nan_safe(x):
    """Library results as the JSON report stores them (NaN/inf as strings, tuples as lists)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: nan_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [nan_safe(v) for v in x]
    return x


def library_numbers(run: Path, seed: int = 3) -> dict:
    """The same measurements, made here by calling the library directly (models built by the
    training code's own builder, not by geohead.diagnose)."""
    from geohead.training.config import config_from_dict
    from geohead.data import ORBIT_FAMILIES, load_dataset, make_view_fn
    from geohead.features import extract
    from geohead.geometry import (
        EffectiveHessian, EscapeSettings, collapse_monitors, escape_curvature, orbit_invariance, slq_density,
        spectrum_summary,
    )
    from geohead.training.evaluate import run_probes
    from geohead.training.model import build_models, build_teacher

    ck = load_checkpoint(run)
    conf = json.loads(json.dumps(ck.meta["config"]))
    conf["probe"].update(enabled=True, n_train=64, n_test=48, linear=False)
    cfg = config_from_dict(conf)
    torch.manual_seed(123)  # any init: every weight is overwritten below
    model, objective, _, _ = build_models(cfg)
    model.load_state_dict(ck.section("model"))
    objective.load_state_dict(ck.section("objective"))
    teacher = build_teacher(model)
    teacher.load_state_dict(ck.section("teacher"))
    model.eval(), teacher.eval(), objective.eval()
    mean, std = ck.meta["data"]["mean"], ck.meta["data"]["std"]

    out = {}
    settings = EscapeSettings(batch_size=6, kind="complete", mode="fast", refine=DiagnoseSettings().refine)
    out["escape"] = escape_curvature(model.head, objective, settings=settings, predictor=model.predictor,
                                     teacher=teacher.head, generator=torch.Generator().manual_seed(seed)).to_dict()
    test = load_dataset("shapes", train=False, n=48, img_size=32, seed=0)
    views = make_view_fn(cfg.data.views or "byol", 32, mean, std, **dict(cfg.data.view_args or {}))(
        test.images[:8], torch.Generator().manual_seed(seed))
    with torch.no_grad():
        z1, z2 = (model.backbone(v.contiguous(memory_format=torch.channels_last)) for v in views[:2])
    eh = EffectiveHessian(model.head, objective, z1, z2, predictor=model.predictor, teacher=teacher.head, bn_mode="eval",
                          dtype=torch.float32)
    out["hessian"] = spectrum_summary(eh, mode="fast", generator=torch.Generator().manual_seed(seed)).to_dict()
    out["density"] = slq_density(eh.H, num_probes=4, num_steps=40, generator=torch.Generator().manual_seed(seed)).to_dict()

    m = torch.tensor(mean).view(1, 3, 1, 1)
    s = torch.tensor(std).view(1, 3, 1, 1)

    def encode(x):
        with torch.no_grad():
            return model.backbone(((x - m) / s).contiguous(memory_format=torch.channels_last))

    out["orbits"] = {}
    for name, fam in ORBIT_FAMILIES.items():
        rep = orbit_invariance(encode, model.head, test.images[:4].float() / 255, fam.fn, fam.params,
                               labels=test.labels[:4], generator=torch.Generator().manual_seed(seed))
        out["orbits"][name] = {**rep.to_dict(), "description": fam.description}
    fb, fh = extract(model.backbone, model.head, test.images, mean, std, channels_last=True)
    out["collapse"] = {"backbone": collapse_monitors(fb).to_dict(), "head": collapse_monitors(fh).to_dict()}
    train = load_dataset("shapes", train=True, n=64, img_size=32, seed=0)
    out["probes"] = run_probes(cfg, model, train, torch.device("cpu"), load_dataset)
    return nan_safe(out)


def test_diagnose_prints_and_writes_exactly_the_library_numbers(byol_run, tmp_path) -> None:
    out = tmp_path / "diag.json"
    res = CliRunner().invoke(main, ["diagnose", str(byol_run), "--json", str(out), *FAST])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    ref = library_numbers(byol_run)
    for part in ("escape", "hessian", "density", "orbits", "collapse", "probes"):
        assert report[part] == ref[part], part  # exact equality, every field
    assert sorted(report["orbits"]) == ["blur", "crop", "hue", "rotate", "saturation"]
    assert report["source"]["objective"] == "byol" and report["source"]["teacher"] is True
    assert report["escape"]["objective"] == "byol" and report["escape"]["batch_size"] == 6
    # the paper's formulas side by side with the width-invariant default
    o = report["orbits"]["rotate"]
    assert {"compression", "compression_paper_l2", "compression_paper_var"} <= set(o)
    assert o["compression_paper_var"] == pytest.approx(
        (o["backbone"]["orbit_spread"] / o["backbone"]["dim"]) / (o["head"]["orbit_spread"] / o["head"]["dim"]), rel=1e-12)

    # the table prints those numbers (fmt: 4 significant digits)
    text = res.output
    e, h = report["escape"], report["hessian"]
    assert e["frame"] == "tangent" and "tangent frame" in text  # BYOL's cosine loss: the sphere-tangent frame
    assert f"equilibrium: {e['equilibrium']} (|grad_Z f| / (max|lambda| |Z|) = {fmt(e['gradient_relative'])}" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("H_tan = G_tan + M"))
    assert line.split()[-3:] == [fmt(e["lambda_min_H"]), fmt(e["lambda_max_H"]), fmt(e["num_negative_H"])]
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("H_eff (ambient, reference)"))
    assert line.split()[-3:] == [fmt(e["lambda_min_H_ambient"]), "-", fmt(e["num_negative_H_ambient"])]
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("G_tan (pullback)"))
    assert line.split()[-3:] == [fmt(e["lambda_min_G"]), fmt(e["lambda_max_G"]), fmt(e["num_negative_G"])]
    assert f"|M|/|H| = {fmt(e['m_over_h'])}" in text and f"v'Mv = {fmt(e['head_curvature'])}" in text
    hl = text.splitlines()[text.splitlines().index(next(ln for ln in text.splitlines() if "lambda_min  lambda_max  #negative  cond" in ln)) + 1]
    assert hl.split() == [fmt(h["lambda_min"]), fmt(h["lambda_max"]), fmt(h["num_negative"]),
                          fmt(h["condition_within_rank"]), fmt(h["m_over_h"]), fmt(h["converged"])]
    for name, o in report["orbits"].items():
        row = next(ln for ln in text.splitlines() if ln.strip().startswith(name + " "))
        t = o["tangents"]
        assert row.split() == [name, fmt(o["compression"]), fmt(o["compression_paper_l2"]), fmt(o["compression_paper_var"]),
                               fmt(t["invariance"]), fmt(t["killed_fraction"]), f"{t['rank_backbone']}->{t['rank_head']}"]
    lines = text.splitlines()
    monitors = lines[next(i for i, ln in enumerate(lines) if ln.startswith("Collapse monitors")):]
    for space, c in report["collapse"].items():
        row = next(ln for ln in monitors if ln.strip().startswith(space + " "))
        assert row.split() == [space, fmt(c["rankme"]), fmt(c["alpha_req"]), fmt(c["normalized_std"]), fmt(c["healthy_std"]),
                               fmt(c["condition"]), f"{c['rank']}/{c['dim']}"]
    from geohead.probes import GuillotineReport

    assert GuillotineReport.from_dict(report["probes"]).table().splitlines()[1] in text


def test_diagnose_default_json_path_and_errors(byol_run, tmp_path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["diagnose", str(byol_run / "last.safetensors"), *FAST, "--no-probes", "--families", "hue"])
    assert res.exit_code == 0, res.output
    report = json.loads((byol_run / "last.diagnose.json").read_text())
    assert list(report["orbits"]) == ["hue"] and report["probes"] is None
    raw = (byol_run / "last.safetensors").read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(raw[:1000])
    for args, needle in (
        ([str(tmp_path / "nope")], "does not exist"),
        ([str(tmp_path / "cut.ckpt")], "truncated or corrupted"),
        ([str(byol_run), "--families", "rotate,zoom"], "unknown orbit families ['zoom']"),
        ([str(byol_run), "--collapse-batch", "1"], "collapse_batch must be >= 2"),
        ([str(byol_run), "--collapse-batch", "1025"], "collapse_batch=1025 is above the bound of 1,024; give at most 1,024"),
        ([str(byol_run), "--hessian-samples", "4096"], "hessian_samples=4096 is above the bound of 1,024"),
        ([str(byol_run), "--data", "no_such_data", "--no-probes"], "unknown dataset"),
    ):
        res = runner.invoke(main, ["diagnose", *args])
        assert res.exit_code == 2, res.output
        msg = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
        assert len(msg) == 1 and needle in msg[0] and "Traceback" not in res.output, res.output
