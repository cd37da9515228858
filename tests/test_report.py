"""geohead report: PNGs of a run (and its diagnose.json) or a search, embedded in one HTML file."""
from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from geohead.cli import main
from geohead.report.page import make_report
from geohead.report.curves import read_metrics
from tiny_runs import tiny_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DIAG_FAST = ["--mode", "fast", "--n-test", "48", "--n-train", "64", "--orbit-images", "6", "--hessian-samples", "12",
             "--collapse-batch", "6", "--no-linear"]


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory) -> Path:
    run = tiny_run(tmp_path_factory, "byol")
    copy = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(run, copy)
    for p in copy.glob("*diagnose.json"):
        p.unlink()
    return copy


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    return struct.unpack(">II", data[16:24])


def embedded(html_text: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html_text)]


def test_run_report_with_diagnose_is_self_contained(run_copy) -> None:
    res = CliRunner().invoke(main, ["diagnose", str(run_copy), *DIAG_FAST])
    assert res.exit_code == 0, res.output
    # in a fresh process: the report must not import pyplot (no change to the user's backend)
    code = (f"import sys; from geohead.report.page import make_report; r = make_report({str(run_copy)!r}); "
            "print(r.kind, [p.name for p in r.pngs], 'matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(" ", 1)[0] == "run" and out.stdout.strip().endswith("False")
    names = ["loss.png", "monitors.png", "hessian.png", "orbit_compression.png", "hessian_density.png", "guillotine.png"]
    assert all(f"'{n}'" in out.stdout for n in names), out.stdout
    html_text = (run_copy / "report.html").read_text()
    images = embedded(html_text)
    assert images == [(run_copy / n).read_bytes() for n in names]  # every PNG, byte for byte, in order
    for n in names:
        w, h = png_size(run_copy / n)
        assert 500 <= w <= 2500 and 300 <= h <= 1000, (n, w, h)
    assert not re.search(r'(src|href)="(?!data:)', html_text)  # nothing outside the file
    assert "<script" not in html_text
    assert "Orbit compression" in html_text and "Guillotine probes" in html_text  # diagnose's table
    diag = json.loads((run_copy / "diagnose.json").read_text())
    assert html_text.count("<figure>") == 6 and diag["escape"]["objective"] == "byol"


def test_metrics_series_and_notes(run_copy, tmp_path) -> None:
    losses, monitors = read_metrics(run_copy)
    lines = [json.loads(x) for x in (run_copy / "metrics.jsonl").read_text().splitlines()]
    assert losses == [r for r in lines if "loss" in r] and monitors == [r for r in lines if r.get("kind") == "monitor"]
    assert [r["step"] for r in losses] == [1, 2] and all("hessian_lambda_min" in m for m in monitors)
    # a run without diagnose.json and without Hessian tracking: the curves it has, and notes saying why not more
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in losses) + "not json\n")
    res = make_report(bare, tmp_path / "out")
    assert [p.name for p in res.pngs] == ["loss.png"] and res.html == tmp_path / "out" / "report.html"
    assert any("geohead diagnose" in n for n in res.notes) and any("hessian_every" in n for n in res.notes)
    assert "geohead diagnose" in res.html.read_text()


def test_report_errors(tmp_path, monkeypatch) -> None:
    runner = CliRunner()
    (tmp_path / "empty").mkdir()
    for args, needle in (([str(tmp_path / "nope")], "does not exist"), ([str(tmp_path / "empty")], "neither a run")):
        res = runner.invoke(main, ["report", *args])
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output, res.output
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = runner.invoke(main, ["report", str(tmp_path / "run")])
    assert res.exit_code == 2 and "needs matplotlib" in res.output and "pip install matplotlib" in res.output, res.output
    assert not (tmp_path / "run" / "report.html").exists()


@pytest.mark.parametrize("relative", [True, False])
def test_search_folder_embeds_the_search_plots(tmp_path, monkeypatch, relative) -> None:
    """A search folder, with geohead.search's plotting stood in by a stub (this test checks the
    report's side of the contract: call write_search_plots(folder), embed what it returns and
    the PNGs search.json names)."""
    from matplotlib.figure import Figure

    folder = tmp_path / "search"
    folder.mkdir()
    (folder / "trials.csv").write_text("number,value,criterion\n0,0.5,1.0\n1,0.6,2.0\n")
    (folder / "best_head.json").write_text('{"format": "geohead.HeadSpec", "in_dim": 8}\n')

    def draw(path: Path, label: str) -> Path:
        fig = Figure(figsize=(4, 3))
        fig.subplots().plot([0, 1], [0, 1], label=label)
        fig.savefig(path)
        return path

    draw(folder / "pareto.png", "pareto")
    (folder / "search.json").write_text(json.dumps({"objective": "barlow", "plots": {"pareto": "pareto.png"}}))
    calls = []

    def write_search_plots(out_dir: Path, dest: Path) -> list[Path]:
        calls.append(Path(out_dir))
        return [draw(Path(dest) / "criteria_vs_accuracy.png", "scatter")]

    draw(folder / "extra.png", "a plot search.json does not name")
    monkeypatch.setitem(sys.modules, "geohead.search", types.SimpleNamespace(write_search_plots=write_search_plots))
    if relative:  # the search's default folder is relative (runs/search_barlow): plots were joined twice
        monkeypatch.chdir(tmp_path)
        folder = Path("search")
    res = CliRunner().invoke(main, ["report", str(folder)])
    assert res.exit_code == 0, res.output
    assert calls == [folder]
    html_text = (folder / "report.html").read_text()
    assert embedded(html_text) == [(folder / name).read_bytes() for name in ("criteria_vs_accuracy.png", "pareto.png",
                                                                              "extra.png")]
    assert "no plots" not in html_text
    assert "geohead search report: barlow" in html_text and "geohead.HeadSpec" in html_text


def test_a_search_page_embeds_at_most_its_bound_of_pngs(tmp_path, monkeypatch) -> None:
    """A folder of many PNGs (and a search.json naming one thousands of times) embeds the first
    MAX_PNGS, sorted, each once, and says the rest were left out."""
    from PIL import Image

    from geohead.report.page import MAX_PNGS

    folder = tmp_path / "search"
    folder.mkdir()
    (folder / "trials.csv").write_text("number,value\n0,0.5\n")
    for i in range(MAX_PNGS + 6):
        Image.fromarray(np.full((2, 2, 3), i, np.uint8)).save(folder / f"p{i:03d}.png")
    (folder / "search.json").write_text(json.dumps({"objective": "barlow", "plots": ["p005.png"] * 5000}))
    monkeypatch.setitem(sys.modules, "geohead.search", types.SimpleNamespace(write_search_plots=lambda f, dest: []))
    res = CliRunner().invoke(main, ["report", str(folder), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    html_text = (tmp_path / "r" / "report.html").read_text()
    names = ["p005.png"] + [f"p{i:03d}.png" for i in range(MAX_PNGS + 6) if i != 5][:MAX_PNGS - 1]
    assert embedded(html_text) == [(folder / n).read_bytes() for n in names]
    assert f"more PNGs than the {MAX_PNGS}" in html_text


def test_a_search_without_trials_yet_reports_its_settings(tmp_path) -> None:
    """A search stopped before its first trial ended holds search.json alone: the page shows it
    and says why there are no plots (before: FileNotFoundError, exit 1)."""
    folder = tmp_path / "search"
    folder.mkdir()
    (folder / "search.json").write_text(json.dumps({"objective": "simclr", "trials": 12}))
    res = CliRunner().invoke(main, ["report", str(folder), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    html_text = (tmp_path / "r" / "report.html").read_text()
    assert "geohead search report: simclr" in html_text and "no trials.csv yet" in html_text
    assert embedded(html_text) == []


def test_a_search_json_nested_too_deeply_is_skipped_with_a_note(tmp_path) -> None:
    """600 levels parse in the json module but a walk of them recursed past Python's limit."""
    folder = tmp_path / "search"
    folder.mkdir()
    (folder / "search.json").write_text('{"plots": ' + "[" * 600 + '"a.png"' + "]" * 600 + "}")
    res = CliRunner().invoke(main, ["report", str(folder), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "nests deeper than 64 levels" in (tmp_path / "r" / "report.html").read_text()


def test_guillotine_figure_has_a_panel_per_known_probe_once(tmp_path) -> None:
    """probes.json's probe names, repeated or unknown, size no figure: one panel per known probe."""
    from PIL import Image

    from geohead.report.run_plots import plot_guillotine

    targets = {t: {"backbone": {"knn": 0.5, "linear": 0.6}, "head": {"knn": 0.4, "linear": 0.5}, "chance": 0.1}
               for t in ("class", "hue")}
    one = plot_guillotine({"probes": ["knn"], "targets": targets}, tmp_path / "one.png")
    many = plot_guillotine({"probes": ["knn"] * 1000 + ["bogus"] * 1000, "targets": targets}, tmp_path / "many.png")
    two = plot_guillotine({"probes": ["knn", "linear", "knn"], "targets": targets}, tmp_path / "two.png")
    widths = [Image.open(p).size[0] for p in (one, many, two)]
    assert widths[0] == widths[1] and widths[2] == 2 * widths[0]


def test_report_plots_a_folder_of_monitor_jsonl_only(tmp_path) -> None:
    """geohead report on what GeometryMonitor writes in someone else's loop: the JSONL alone."""
    import torch
    from torch import nn

    from geohead import GeometricHead
    from geohead.monitor import GeometryMonitor

    torch.manual_seed(0)
    backbone, head = nn.Linear(6, 8), GeometricHead(8, 4, hidden_dim=8)
    with GeometryMonitor(backbone, head, every=1, log_file=tmp_path / "geometry.jsonl") as monitor:
        for _ in range(3):
            head(backbone(torch.randn(16, 6)))
    _, monitors = read_metrics(tmp_path)
    assert [m["step"] for m in monitors] == [1, 2, 3] and monitors == monitor.history
    res = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "monitors.png").is_file() and (tmp_path / "report.html").is_file()
    res = CliRunner().invoke(main, ["report", str(tmp_path / "empty_dir_missing")])
    assert res.exit_code == 2


PROBES = {"probes": ["knn", "linear"], "split": {"source": "shapes", "held_out": True},
          "targets": {"class": {"chance": 0.1, "num_classes": 10, "backbone": {"knn": 0.62, "linear": 0.7},
                                "head": {"knn": 0.45, "linear": 0.5}},
                      "hue": {"chance": 0.25, "num_classes": 4, "backbone": {"knn": 0.8, "linear": 0.9},
                              "head": {"knn": 0.3, "linear": 0.35}}}}


def figcaptions(html_text: str) -> dict[str, str]:
    """PNG name -> its caption text, as the report's <figcaption>s write them."""
    import html

    return {name: html.unescape(text) for name, text in re.findall(r"<figcaption>([^<:]+\.png)(?:: ([^<]*))?</figcaption>", html_text)}


@pytest.mark.parametrize("relative", [True, False])
def test_run_probes_are_plotted_with_a_caption(tmp_path, monkeypatch, relative) -> None:
    from geohead.report.captions import probes_caption

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 2.0 - 0.1 * s}) + "\n" for s in range(1, 11)))
    (run / "probes.json").write_text(json.dumps(PROBES))
    if relative:
        monkeypatch.chdir(tmp_path)
        run = Path("run")
    res = make_report(run)
    assert [p.name for p in res.pngs] == ["loss.png", "probes.png"]
    html_text = (run / "report.html").read_text()
    assert embedded(html_text) == [(run / n).read_bytes() for n in ("loss.png", "probes.png")]
    captions = figcaptions(html_text)
    assert "the guillotine gap, expected" in captions["probes.png"] and "backbone 0.620, head 0.450" in captions["probes.png"]
    assert "falls (1.9 → 1)" in captions["loss.png"]
    # the other verdicts of the probes' caption
    level = json.loads(json.dumps(PROBES))
    level["targets"]["class"]["head"]["knn"] = 0.615
    assert "level" in probes_caption(level)
    level["targets"]["class"]["backbone"]["knn"] = level["targets"]["class"]["head"]["knn"] = 0.12
    assert "near chance" in probes_caption(level)


def test_monitor_only_folder_plots_the_loss_it_holds(tmp_path) -> None:
    """GeometryMonitor records no loss; a loop that writes loss lines into its JSONL (or a loss key
    on the records) gets the loss curve, captioned; without one, a note says how to get it."""
    from geohead.report.captions import loss_caption

    rec = {"batch": 16, "rankme_backbone": 5.0, "rankme_head": 3.0, "std_backbone": 0.2, "std_head": 0.2,
           "std_healthy_backbone": 0.35, "std_healthy_head": 0.5}
    lines = [{"step": s, **rec} for s in (1, 2, 3)] + [{"step": s, "loss": 1.0} for s in (1, 2, 3)]
    (tmp_path / "geometry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    res = make_report(tmp_path)
    assert [p.name for p in res.pngs] == ["loss.png", "monitors.png"]
    captions = figcaptions((tmp_path / "report.html").read_text())
    assert "flat from the start" in captions["loss.png"] and captions["monitors.png"].endswith(
        "Here the last std is the head's 0.40, the backbone's 0.57 of healthy: no collapse.")
    # the loss as a key of the monitor records
    keyed = tmp_path / "keyed"
    keyed.mkdir()
    (keyed / "geometry.jsonl").write_text("".join(json.dumps({"step": s, **rec, "loss": 3.0 / s}) + "\n" for s in (1, 2, 3)))
    losses, monitors = read_metrics(keyed)
    assert [r["loss"] for r in losses] == [3.0, 1.5, 1.0] and len(monitors) == 3
    assert "loss.png" in [p.name for p in make_report(keyed).pngs]
    # no loss at all: monitors only, and a note
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "geometry.jsonl").write_text("".join(json.dumps({"step": s, **rec}) + "\n" for s in (1, 2)))
    res = make_report(bare)
    assert [p.name for p in res.pngs] == ["monitors.png"] and any("holds no loss" in n for n in res.notes)
    assert "rises" in loss_caption([{"step": s, "loss": float(s)} for s in range(1, 6)])
    assert "diverged" in loss_caption([{"step": 1, "loss": 1.0}, {"step": 2, "loss": float("nan")}])


@pytest.mark.parametrize("name", ["last.safetensors", "last.ckpt"])
def test_a_folder_holding_only_a_checkpoint_is_a_run(tmp_path, name):
    """A run folder is recognised by its checkpoint under either name (older runs: last.ckpt)."""
    from geohead.report.page import ReportError, detect

    (tmp_path / name).write_bytes(b"x")
    assert detect(tmp_path) == "run"
    (tmp_path / name).unlink()
    with pytest.raises(ReportError, match="last.safetensors"):
        detect(tmp_path)


def test_the_monitors_caption_warns_where_diagnose_would_in_either_space() -> None:
    """The caption reads both spaces with diagnose's collapse rule (std ratio below 0.1, or RankMe
    below 0.02 of min(batch, width)): a collapsed backbone under a healthy head is named."""
    from geohead.report.captions import monitors_caption

    healthy = {"step": 9, "batch": 64, "rankme_backbone": 20.0, "rankme_head": 30.0, "std_backbone": 0.1,
               "std_healthy_backbone": 0.177, "std_head": 0.11, "std_healthy_head": 0.125}
    assert monitors_caption([healthy]).endswith("the head's 0.88, the backbone's 0.56 of healthy: no collapse.")
    sick_backbone = {**healthy, "std_backbone": 0.0034, "rankme_backbone": 1.7}  # the README loop's toy on noise
    assert monitors_caption([healthy, sick_backbone]).endswith(
        "the head's 0.88, the backbone's 0.02 of healthy: the backbone is collapsing.")
    rank_only = {**healthy, "rankme_head": 1.2}  # std fine, one direction of 64: RankMe alone warns
    assert monitors_caption([rank_only]).endswith("the head is collapsing.")
    both = {**sick_backbone, "std_head": 0.001}
    assert monitors_caption([both]).endswith("the head and the backbone are collapsing.")
    assert monitors_caption([sick_backbone, healthy]).endswith("no collapse.")  # the last record decides


def test_several_monitor_logs_in_one_folder_are_not_drawn_as_one_curve(tmp_path) -> None:
    """Two runs' GeometryMonitor logs side by side: the newest is plotted, a note names the others,
    and the page is titled by it; the diagnose note points at a checkpoint (there is none here)."""
    import os

    rec = {"batch": 16, "rankme_backbone": 5.0, "rankme_head": 3.0, "std_backbone": 0.2, "std_head": 0.2,
           "std_healthy_backbone": 0.35, "std_healthy_head": 0.5}
    (tmp_path / "geometry.jsonl").write_text("".join(json.dumps({"step": s, **rec}) + "\n" for s in (1, 2, 3)))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"step": s, **rec}) + "\n" for s in (10, 20)))
    os.utime(tmp_path / "geometry.jsonl", (2_000_000_000, 2_000_000_000))  # the newer of the two
    os.utime(tmp_path / "b.jsonl", (1_000_000_000, 1_000_000_000))
    _, monitors = read_metrics(tmp_path)
    assert [m["step"] for m in monitors] == [1, 2, 3]
    res = make_report(tmp_path)
    assert any(n.startswith("2 GeometryMonitor logs here (b.jsonl, geometry.jsonl): the curves are the newest, "
                            "geometry.jsonl") for n in res.notes), res.notes
    html_text = res.html.read_text()
    assert "<title>geohead run report: GeometryMonitor log geometry.jsonl</title>" in html_text
    assert any("`geohead diagnose CKPT`" in n for n in res.notes) and not any("diagnose " + str(tmp_path) in n for n in res.notes)
    one = tmp_path / "one"
    one.mkdir()
    (one / "geometry.jsonl").write_text((tmp_path / "b.jsonl").read_text())
    assert not any("GeometryMonitor logs here" in n for n in make_report(one).notes)


def test_a_missing_report_input_lists_every_input_report_takes(tmp_path) -> None:
    res = CliRunner().invoke(main, ["report", str(tmp_path / "barlow.diagnose.json")])
    assert res.exit_code == 2 and "does not exist" in res.output and "Traceback" not in res.output
    assert "a folder of GeometryMonitor *.jsonl logs, or the JSON of `geohead diagnose`" in res.output, res.output


def test_a_monitor_log_appended_by_a_rerun_is_drawn_from_its_last_run(tmp_path) -> None:
    """GeometryMonitor appends to its log_file, so a rerun of the same loop starts again at step 1
    in the same file: the report keeps the last run, and says so."""
    import torch
    from torch import nn

    from geohead import GeometricHead
    from geohead.monitor import GeometryMonitor

    torch.manual_seed(0)
    backbone, head = nn.Linear(6, 8), GeometricHead(8, 4, hidden_dim=8)
    for steps in (3, 2):  # the same loop run twice with one log file
        with GeometryMonitor(backbone, head, every=1, log_file=tmp_path / "geometry.jsonl") as monitor:
            for _ in range(steps):
                head(backbone(torch.randn(16, 6)))
                monitor.log_loss(torch.tensor(1.0))
    lines = [json.loads(x) for x in (tmp_path / "geometry.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3, 1, 2]
    losses, monitors = read_metrics(tmp_path)
    assert monitors == lines[3:] and losses == [r for r in lines[3:] if "loss" in r] and len(losses) == 1
    res = make_report(tmp_path)
    assert any(n.startswith("geometry.jsonl holds 2 runs (its steps start again 1 time(s)") for n in res.notes), res.notes
