"""diagnose_model on any head: widths found by a forward, the header says what it found, the
verdict first, a diverged model named as such (exit 2 from the CLI), a progress bar with ETA."""
from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from geohead.diagnose import DiagnoseSettings, format_table

SMALL = dict(n_test=48, n_train=48, n_orbit_images=4, hessian_samples=6, collapse_batch=4, refine=0, mode="fast",
             density_probes=1, density_steps=4, linear=False, families=("rotate", "crop"))


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())  # d = 128


def test_a_plain_sequential_head_is_measured_and_described() -> None:
    from geohead import diagnose_model
    from geohead.data import load_dataset
    from geohead.geometry import collapse_monitors

    backbone = cnn()
    head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 32))
    report = diagnose_model(backbone, head, "barlow", img_size=16, settings=DiagnoseSettings(**SMALL), progress=None)
    assert report["data"]["name"] == "shapes"  # the CLI's default data, no download
    assert report["source"]["head_dims"] == [128, 32]
    assert report["source"]["head"] == "Sequential: Linear 128→64, ReLU, Linear 64→32"
    text = format_table(report)
    assert "head Sequential: Linear 128→64, ReLU, Linear 64→32" in text.splitlines()[0] and "None" not in text.splitlines()[0]
    assert text.splitlines()[3].startswith("Verdict: ")  # the verdict before any table
    # the head's numbers are the user's head's own outputs (the widths wrapper computes the same)
    test = load_dataset("shapes", train=False, n=48, img_size=16, seed=0)
    mean, std = report["data"]["mean"], report["data"]["std"]
    x = (test.images.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    with torch.no_grad():
        want = collapse_monitors(head(backbone(x))).to_dict()
    assert report["collapse"]["head"]["rankme"] == pytest.approx(want["rankme"], rel=1e-5)
    assert report["escape"]["batch_size"] == 4 and math.isfinite(report["escape"]["lambda_min_H"])


def test_a_head_that_does_not_take_the_features_names_the_width() -> None:
    from geohead import diagnose_model

    with pytest.raises(ValueError, match="input width is 128"):
        diagnose_model(cnn(), nn.Linear(64, 8), "barlow", img_size=16, settings=DiagnoseSettings(**SMALL), progress=None)


def test_the_collapse_warning_follows_the_monitor_thresholds() -> None:
    from geohead.diagnose.verdict import RANKME_FRACTION_COLLAPSED, STD_RATIO_COLLAPSED, collapse_warning, verdict
    from geohead.geometry import collapse_monitors

    # the numbers: RankMe 2.0, std 0.0014 against a healthy 0.044 (512 dims) must warn
    sick = {"rankme": 2.0, "normalized_std": 0.0014, "healthy_std": 0.044, "dim": 512, "n": 1000}
    w = collapse_warning(sick)
    assert w and "RankMe 2" in w and "0.0014" in w
    assert collapse_warning({**sick, "rankme": 300.0, "normalized_std": 0.044}) is None
    # on real batches: nearly rank-2 features warn, isotropic ones do not
    g = torch.Generator().manual_seed(0)
    base = torch.randn(1, 512, generator=g) * 10
    collapsed = base + 1e-3 * torch.randn(1000, 2, generator=g) @ torch.randn(2, 512, generator=g)
    healthy = torch.randn(1000, 512, generator=g)
    m_sick, m_ok = collapse_monitors(collapsed).to_dict(), collapse_monitors(healthy).to_dict()
    assert m_sick["normalized_std"] / m_sick["healthy_std"] < STD_RATIO_COLLAPSED and collapse_warning(m_sick)
    assert m_ok["rankme"] > RANKME_FRACTION_COLLAPSED * 512 and collapse_warning(m_ok) is None
    text = verdict({"collapse": {"backbone": m_sick, "head": m_ok}, "orbit_summary": {"geometric_mean": 2.0, "head": "compresses",
                    "families": 5}, "probes": {"targets": {"class": {"backbone": {"knn": 0.8}, "head": {"knn": 0.6}}}}})
    assert "WARNING: the backbone looks collapsed" in text and "head compresses" in text and "+0.200" in text


@pytest.mark.parametrize("bad", [float("nan"), 1e30])
def test_a_diverged_backbone_is_named_as_such(bad) -> None:
    from geohead import diagnose_model
    from geohead.errors import DivergedModelError

    backbone = cnn()
    with torch.no_grad():
        backbone[0].bias.fill_(bad)
    with pytest.raises(DivergedModelError, match="diverged"):
        diagnose_model(backbone, nn.Linear(128, 8), "barlow", img_size=16, settings=DiagnoseSettings(**SMALL), progress=None)


def test_cli_exits_2_for_a_diverged_checkpoint(tmp_path) -> None:
    from click.testing import CliRunner

    from geohead.cli import main
    from geohead.pretrained.synthetic import write_lightly

    path, _ = write_lightly(tmp_path)
    ck = torch.load(path, weights_only=True)
    ck["state_dict"]["projection_head.layers.0.weight"].fill_(float("inf"))
    torch.save(ck, path)
    res = CliRunner().invoke(main, ["diagnose", str(path), "--method", "barlow", "--data", "shapes", "--n-test", "16",
                                    "--n-train", "16", "--json", str(tmp_path / "d.json")])
    assert res.exit_code == 2, res.output
    assert "diverged" in res.output and "Traceback" not in res.output and "LinAlgError" not in res.output


def test_the_stage_bar_shows_an_eta_and_ends_full() -> None:
    from geohead.diagnose.progress import WEIGHTS, StageBar

    out = io.StringIO()
    bar = StageBar(families=2, probes=True, file=out, disable=False)
    for msg, part in [("data", "data"), ("escape", "escape"), ("orbits: rotate", "orbits"), ("orbits: crop", "orbits")]:
        bar(msg, part)
    assert bar.bar.n == WEIGHTS["data"] + WEIGHTS["escape"] + WEIGHTS["orbits"]
    for msg, part in [("H_eff", "hessian"), ("collapse", "collapse"), ("probes", "probes"), ("", None)]:
        bar(msg, part)
    assert bar.bar.n == bar.bar.total and "<" in out.getvalue()  # elapsed<remaining: the ETA


def test_the_guillotine_gap_is_read_only_above_chance_and_beyond_the_probe_noise() -> None:
    """Near chance the gap says nothing; within twice the binomial noise of the two accuracies on
    the probe's test images it is no gap; beyond it, the usual reading."""
    from geohead.diagnose.verdict import verdict

    def gap(b: float, h: float, n: int | None, chance: float = 0.1) -> str:
        report = {"probes": {"targets": {"class": {"chance": chance, "backbone": {"knn": b}, "head": {"knn": h}}}},
                  "data": {"probe_split": {"n_test": n}}}
        return verdict(report).split("Guillotine gap")[1]

    # an untrained model: 0.125 vs 0.0625 on 64 images, chance 0.109 (both below 0.109 + 0.1 * 0.891)
    assert "both near chance, 0.109: the features separate the classes little" in gap(0.125, 0.0625, 64, chance=0.109375)
    # 0.50 vs 0.45 on 200 images: noise 2 * sqrt((0.25 + 0.2475) / 200) = 0.0998 > 0.05
    noise = 2 * math.sqrt((0.5 * 0.5 + 0.45 * 0.55) / 200)
    assert f"within the probe's sampling noise, about ±{noise:.3f} on 200 test images: no gap to read" in gap(0.5, 0.45, 200)
    # the same accuracies on 2,000 images: noise 0.0316 < 0.05, the backbone keeps what the head drops
    assert "+0.050 (the backbone keeps what the head drops: use the backbone)" in gap(0.5, 0.45, 2000)
    assert "(the head loses nothing the probe sees)" in gap(0.45, 0.6, 2000)
    assert "keeps what the head drops" in gap(0.8, 0.6, None)  # a report without its probe split: no noise to read
