"""benchmarks/paper/: the measurement helpers against reference formulas, and each script end to end
at ``--scale smoke`` (table printed, PNG and results.json written; marked slow: ~20-60 s each)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "benchmarks" / "paper"
sys.path.insert(0, str(PAPER))

import _common as C  # noqa: E402


def _reference_orbit_metrics(x: torch.Tensor, labels: torch.Tensor) -> dict:
    """plot_results.py's metrics written out with explicit loops (float64)."""
    x = x.double()
    n, P, D = x.shape
    intra, spread = [], []
    for o in x:
        ds = [float((o[i] - o[j]).norm()) for i in range(P) for j in range(i + 1, P)]
        intra.append(sum(ds) / len(ds))
        spread.append(float((o - o.mean(0)).pow(2).sum(1).mean()))
    cents = [x[labels == c].reshape(-1, D).mean(0) for c in labels.unique()]
    inter = [float((cents[i] - cents[j]).norm()) for i in range(len(cents)) for j in range(i + 1, len(cents))]
    return {"spread": sum(spread) / n, "d_intra": sum(intra) / n, "d_inter": sum(inter) / len(inter)}


def test_paper_orbit_metrics_match_the_released_formulas() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, 7, generator=g)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    got = C.paper_orbit_metrics(x, labels)
    ref = _reference_orbit_metrics(x, labels)
    for key in ("spread", "d_intra", "d_inter"):
        assert math.isclose(got[key], ref[key], rel_tol=1e-12), key
    assert math.isclose(got["ratio"], ref["d_inter"] / ref["d_intra"], rel_tol=1e-12)
    # a global scale changes every distance but no ratio
    s = C.paper_orbit_metrics(3.0 * x.double(), labels)
    assert math.isclose(s["spread"], 9 * got["spread"], rel_tol=1e-12)
    assert math.isclose(s["ratio"], got["ratio"], rel_tol=1e-12)


def test_clamped_condition_is_lambda_max_times_1e7_when_rank_deficient() -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(200, 3, generator=g) @ torch.randn(3, 16, generator=g)  # rank 3 in 16 dims
    zn = torch.nn.functional.normalize(z, dim=1)
    zc = zn - zn.mean(0)
    lam_max = float(torch.linalg.eigvalsh(zc.T @ zc / 199).max())
    assert math.isclose(C.clamped_condition(z), lam_max / 1e-7, rel_tol=1e-4)
    full = torch.randn(500, 4, generator=g)  # full rank: the clamp is inactive
    fn = torch.nn.functional.normalize(full, dim=1)
    fc = fn - fn.mean(0)
    lam = torch.linalg.eigvalsh(fc.T @ fc / 499)
    assert math.isclose(C.clamped_condition(full), float(lam[-1] / lam[0]), rel_tol=1e-4)


def test_notebook_ratio_carries_the_width_factor_and_relative_compression_does_not() -> None:
    from geohead.geometry.orbits import compression, space_geometry
    from width_artefact import isometry, notebook_ratio

    g = torch.Generator().manual_seed(1)
    z = torch.randn(8, 12, 6, generator=g)  # 8 orbits of 12 views in d = 6
    for m in (1, 4, 16):
        q = isometry(6, 6 * m, seed=m)
        assert torch.allclose(q.T @ q, torch.eye(6), atol=1e-5)
        ze = z @ q.T  # the identity head, widened by an isometry
        assert math.isclose(notebook_ratio(z, ze), m, rel_tol=1e-4)
        assert math.isclose(compression(space_geometry(z), space_geometry(ze))["relative"], 1.0, rel_tol=1e-5)


def test_rot90_split_turns_each_image_by_its_label() -> None:
    from geohead.data.dataset import ImageData

    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (16, 3, 8, 8), generator=g, dtype=torch.uint8)
    data = ImageData(imgs, torch.zeros(16, dtype=torch.long), ["a"], name="t")
    out, k = C.rot90_split(data, seed=3)
    assert set(k.tolist()) <= {0, 1, 2, 3} and len(set(k.tolist())) > 1
    for i in range(16):
        assert torch.equal(out[i], torch.rot90(imgs[i], int(k[i]), dims=(1, 2)))


def test_table_prints_three_columns() -> None:
    t = C.Table("demo")
    t.add("compression (×)", 21.85, 8.9341, 1.4627, "note")
    t.add("missing", None, float("nan"), 1e-9)
    text = t.text()
    assert "paper" in text and "geohead, paper's formula" in text and "geohead, corrected" in text
    assert "21.85" in text and "8.934" in text and "1.463" in text and "—" in text and "1e-09" in text
    assert t.markdown().count("\n|") == 4


SCRIPTS = ["collapse_escape", "orbit_compression", "guillotine", "depth_ablation", "linear_whitening", "width_artefact"]


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_smoke(script: str, tmp_path, shared_data) -> None:
    out, runs = tmp_path / "out", tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, str(PAPER / f"{script}.py"), "--scale", "smoke", "--out", str(out), "--runs", str(runs),
         "--data-dir", str(shared_data)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "geohead, paper's formula" in proc.stdout and "geohead, corrected" in proc.stdout
    pngs = list(out.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    res = json.loads((out / "results.json").read_text())
    assert res["scale"] == "smoke" and res["wall_s"] > 0
    assert (out / "tables.md").read_text().startswith("**")


@pytest.mark.slow
def test_pretrained_dichotomy_table_on_the_synthetic_layouts(tmp_path) -> None:
    """benchmarks/paper/pretrained.py end to end on the six synthetic layouts (~15 s on 2 cores)."""
    proc = subprocess.run([sys.executable, str(PAPER / "pretrained.py"), "--synthetic", "--scale", "smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| synthetic")]
    assert len(rows) == 6 and all(("compresses" in r) != ("expands" in r) for r in rows)
    results = json.loads((tmp_path / "results.json").read_text())
    assert all(r["pretrained"]["head_check"]["allclose"] for r in results.values())
    from click.testing import CliRunner

    from geohead.cli import main

    page = CliRunner().invoke(main, ["report", str(tmp_path / results["synthetic vicreg"]["diagnose_json"]), "--out", str(tmp_path / "p")])
    assert page.exit_code == 0 and (tmp_path / "p" / "report.html").is_file(), page.output
