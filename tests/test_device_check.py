"""benchmarks/device_check.py (the one-command GPU check) dry-run on the CPU at --tiny size, so the
script cannot rot while no GPU is lent: every part runs, writes its fields, and its numbers agree
with references computed here (geohead's own training step, a dense Hessian, the search's files).

The fast test skips the bf16 + compile throughput mode (inductor's C++ build of the ResNet step
takes ~50-95 s cold on 2 cores); the slow test runs the whole dry run, that mode included.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from step_compare import BF16_LOSS_RTOL, one_step

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.py"
sys.path.insert(0, str(SCRIPT.parent))
import device_check as dc  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # the references here (a 512 x 512 dense H_eff) are tiny


def dry_run(out: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    path = out / "device_check.json"
    assert path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(path.read_text())


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    out = tmp_path_factory.mktemp("device_check")
    proc, report = dry_run(out, "--modes", "fp32,bf16", "--threads", "1")
    return proc, report, out


def test_dry_run_succeeds_and_prints_the_table(fast) -> None:
    proc, report, out = fast
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert report["ok"] is True and list(report["parts"]) == list(dc.PARTS)
    env = report["environment"]
    assert env["device"] == "cpu" and env["tiny"] is True and env["torch"] == torch.__version__
    assert report["sizes"] == {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(dc.TINY).items()}
    for name, rec in report["parts"].items():
        assert rec["status"] == "ok" and rec["error"] is None and rec["seconds"] > 0, (name, rec.get("error"))
    table = (out / "device_check.txt").read_text().strip()
    assert table in proc.stdout
    for name in dc.PARTS:
        assert any(line.startswith(name) and " ok " in line for line in table.splitlines()), name


def test_tests_part_collects_every_cuda_test_and_skips_them_without_cuda(fast) -> None:
    _, report, out = fast
    tests = report["parts"]["tests"]["result"]
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                             "tests/test_cuda.py"], cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    expected = sorted(line.split("::", 1)[1] for line in listed.splitlines() if line.startswith("tests/test_cuda.py::"))
    assert expected and sorted(t["name"].split("::", 1)[1] for t in tests["tests"]) == expected
    assert tests["skipped"] == len(expected) and tests["passed"] == tests["failed"] == tests["error"] == 0
    assert all(t["outcome"] == "skipped" and "needs CUDA" in t["message"] for t in tests["tests"])
    assert (out / "cuda_tests.log").is_file() and (out / "cuda_tests.xml").is_file()


def test_throughput_rows_measure_geohead_training_steps(fast, tmp_path) -> None:
    _, report, _ = fast
    tp = report["parts"]["throughput"]["result"]
    assert tp["backbone"] == "resnet18_w16" and tp["batch_size"] == dc.TINY.batch
    rows = {m["mode"]: m for m in tp["modes"]}
    assert list(rows) == ["fp32", "bf16"]
    for m in rows.values():
        assert m["ok"] and m["views_device"] == "cpu" and m["peak_mem_mb"] is None and not m["compiled"]
        assert len(m["losses"]) == dc.TINY.warmup + dc.TINY.steps and all(map(lambda x: x == x, m["losses"]))
        assert m["img_per_s"] == pytest.approx(dc.TINY.steps * dc.TINY.batch / m["timed_s"], rel=1e-3)
        assert 0 < m["views_ms"] < m["step_ms"]
    assert rows["bf16"]["autocast_bf16"] and not rows["fp32"]["autocast_bf16"]
    # the script's first loss is geohead's own step 0 of the same recipe (same weights, same views)
    data, _, _ = dc.data_source(dc.default_data_dir())
    assert tp["data"] == data
    ref = one_step(dc.train_config(dc.TINY, torch.device("cpu"), "fp32", data, tmp_path))
    assert rows["fp32"]["loss0"] == pytest.approx(ref.loss, rel=1e-5)
    assert 0 < rows["bf16"]["loss0_rel_vs_fp32"] <= BF16_LOSS_RTOL


def test_hvp_part_agrees_with_the_dense_hessian(fast) -> None:
    from geohead.geometry import EffectiveHessian

    _, report, _ = fast
    hvp = report["parts"]["hvp"]["result"]
    assert (hvp["batch"], hvp["d"]) == (dc.TINY.hvp_batch, dc.TINY.hvp_dim)
    head, obj, z1, z2 = dc.hvp_problem(dc.TINY.hvp_batch, dc.TINY.hvp_dim, dc.TINY.hvp_hidden)
    eh = EffectiveHessian(head, obj, z1, z2)
    dense = eh.H.dense()
    lam = torch.linalg.eigvalsh(dense)
    v = torch.randn(eh.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    scale = float(lam.abs().max())
    for name, tol in (("float64", 1e-10), ("float32", 1e-4)):
        d = hvp["dtypes"][name]
        assert d["dim"] == eh.dim and d["lanczos_steps"] == dc.TINY.lanczos_steps == len(d["ritz_values"])
        assert d["hv_norm"] == pytest.approx(float((dense @ v).norm()), rel=tol)
        # Ritz values of a Krylov run lie inside the spectrum (interlacing) ...
        assert float(lam[0]) - tol * scale <= d["lambda_min"] <= d["lambda_max"] <= float(lam[-1]) + tol * scale
        assert d["symmetry_rel_err"] <= (1e-10 if name == "float64" else 1e-4)
    f64 = hvp["dtypes"]["float64"]
    # ... and after 20 steps the extremes of this 512-dimensional operator are found to 1e-4 of its
    # scale (measured: 2e-5 at the smallest end)
    assert abs(f64["lambda_min"] - float(lam[0])) <= 1e-4 * scale and abs(f64["lambda_max"] - float(lam[-1])) <= 1e-4 * scale
    assert f64["finite_difference_rel_err"] <= 1e-5 and "cpu_float64_rel_err" not in f64  # the device is the CPU


def test_search_part_reports_the_search_it_ran(fast) -> None:
    from geohead.heads import HeadSpec

    _, report, out = fast
    s = report["parts"]["search"]["result"]
    summary = json.loads((out / "search" / "search.json").read_text())
    assert s["trials"] == summary["trials"] and s["spearman"] == summary["spearman"]
    assert summary["trials"]["complete"] + summary["trials"]["pruned"] == dc.TINY.search_trials and summary["trials"]["failed"] == 0
    assert s["best"]["number"] == summary["best"]["number"] and s["best"]["score"] == summary["best"]["score"]
    assert HeadSpec.load(out / "search" / "pick_head.json").describe() == s["best"]["head_desc"]
    assert s["verdict"]["recommended"] == summary["verdict"]["recommended"]


def test_a_failing_part_keeps_the_other_parts(tmp_path) -> None:
    proc, report = dry_run(tmp_path, "--parts", "hvp,search", "--search-timeout", "-1", "--threads", "1", timeout=200)
    assert proc.returncode == 1 and report["ok"] is False
    assert list(report["parts"]) == ["hvp", "search"]
    assert report["parts"]["hvp"]["status"] == "ok" and report["parts"]["hvp"]["result"]["dtypes"]["float64"]["lanczos_steps"] == 20
    search = report["parts"]["search"]
    assert search["status"] == "failed" and "timeout" in search["error"] and "Traceback" in search["traceback"]
    assert "search" in proc.stdout and "failed" in proc.stdout


@pytest.mark.slow
def test_full_dry_run_with_compile_fits_in_three_minutes(tmp_path) -> None:
    proc, report = dry_run(tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = {m["mode"]: m for m in report["parts"]["throughput"]["result"]["modes"]}
    assert list(rows) == list(dc.MODES)
    comp = rows["bf16+compile"]
    assert comp["ok"] and comp["compiled"] and comp["autocast_bf16"] and comp["loss0_rel_vs_fp32"] <= BF16_LOSS_RTOL
    assert report["wall_s"] <= 180, report["wall_s"]


def test_a_stored_report_renders_every_part_and_its_rows() -> None:
    """device_report.table on the H200 run stored in benchmarks/results: a line per part with its
    status, a row per throughput mode and H_eff dtype with that record's numbers; a failed mode
    and a part's error are shown in place of numbers."""
    from device_report import PAD, table

    report = json.loads((ROOT / "benchmarks" / "results" / "device_check_h200.json").read_text())["run1_all_parts"]
    lines = table(report).splitlines()
    for name, rec in report["parts"].items():
        assert any(line.startswith(f"{name:12s} {rec['status']:7s} {rec['seconds']:8.1f}") for line in lines), name
    for m in report["parts"]["throughput"]["result"]["modes"]:
        assert any(line.startswith(f"{PAD}{m['mode']:13s} {m['img_per_s']:9.1f}") for line in lines), m["mode"]
    for dt, d in report["parts"]["hvp"]["result"]["dtypes"].items():
        assert any(line.startswith(f"{PAD}{dt:8s} {d['first_hvp_s']:10.4f}") for line in lines), dt
    report["parts"]["throughput"]["result"]["modes"][0].update(ok=False, error="out of memory")
    report["parts"]["hvp"]["error"] = "boom"
    lines = table(report).splitlines()
    mode = report["parts"]["throughput"]["result"]["modes"][0]["mode"]
    assert f"{PAD}{mode:13s} failed: out of memory" in lines and f"{PAD}error: boom" in lines
