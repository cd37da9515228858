"""Moving a head to another backbone width (HeadSpec.rescale) and the proxy record (found_on)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from geohead.errors import SpecError
from geohead.heads import GeometricHead, HeadSpec, preset_spec, read_found_on

ROOT = Path(__file__).resolve().parents[1]


def test_rescale_keeps_widths_as_the_same_multiples_of_d():
    pick = HeadSpec(in_dim=128, out_dim=512, hidden_dim=512, depth=1, activation="identity", norm=None, last_norm="batch")
    assert pick.rescale(512) == pick.replace(in_dim=512, out_dim=2048, hidden_dim=2048)
    published = preset_spec("simclr", 128, smooth=False, hidden_dim=512, out_dim=128)
    wide = published.rescale(256)
    assert (wide.in_dim, wide.hidden_dim, wide.out_dim) == (256, 1024, 256)
    assert wide.replace(in_dim=128, hidden_dim=512, out_dim=128) == published  # nothing else moved
    assert pick.rescale(128) is pick
    odd = HeadSpec(in_dim=128, out_dim=100, hidden_dim=3).rescale(48)  # round(37.5) = 38, round(1.125) = 1
    assert (odd.out_dim, odd.hidden_dim) == (38, 1)
    tiny = HeadSpec(in_dim=512, out_dim=1, hidden_dim=1).rescale(8)
    assert (tiny.out_dim, tiny.hidden_dim) == (1, 1)


def test_rescale_keeps_dino_prototypes_and_builds():
    spec = preset_spec("dino", 128, hidden_dim=256, out_dim=64, prototypes=1024).rescale(256)
    assert (spec.hidden_dim, spec.out_dim, spec.prototypes) == (512, 128, 1024)
    import torch

    assert GeometricHead.from_spec(spec)(torch.randn(4, 256)).shape == (4, 1024)


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "512", 1 << 21])
def test_rescale_refuses_a_bad_width(bad):
    with pytest.raises(SpecError, match="rescale: in_dim must be an integer"):
        HeadSpec(in_dim=128, out_dim=64).rescale(bad)


def test_found_on_round_trips_beside_the_spec(tmp_path):
    spec = HeadSpec(in_dim=128, out_dim=512, depth=1, activation="identity", norm=None)
    proxy = {"backbone": "resnet18_w16", "d": 128, "steps": 351, "epochs": 9.0, "n_train": 10000, "batch_size": 256,
             "data": "shapes", "objective": "barlow"}
    path = tmp_path / "best_head.json"
    spec.to_json(path, found_on=proxy)
    assert HeadSpec.load(path) == spec
    assert read_found_on(path) == proxy
    spec.to_json(tmp_path / "plain.json")
    assert read_found_on(tmp_path / "plain.json") is None


@pytest.mark.parametrize("found_on, match", [
    ([1, 2], "must be a JSON object"),
    ({"checkpoint_path": "/etc/passwd"}, "unknown found_on key"),
    ({"d": [128]}, "found_on.d must be a finite number >= 0"),
    ({"d": "wide"}, "found_on.d must be a finite number >= 0"),
    ({"epochs": -1}, "found_on.epochs must be a finite number >= 0"),
    ({"n_train": float("inf")}, "found_on.n_train must be a finite number >= 0"),
    ({"data": "x" * 201}, "found_on.data must be a name of at most 200 characters"),
    ({"backbone": 5}, "found_on.backbone must be a name"),
    ({"d": True}, "found_on.d must be a finite number >= 0"),
])
def test_a_bad_found_on_is_refused(tmp_path, found_on, match):
    d = HeadSpec(in_dim=8, out_dim=4).to_dict() | {"found_on": found_on}
    (tmp_path / "h.json").write_text(json.dumps(d))
    with pytest.raises(SpecError, match=match):
        HeadSpec.load(tmp_path / "h.json")


def test_train_says_how_the_run_differs_from_the_proxy(tmp_path):
    from geohead.commands.train import _rescale_note
    from geohead.training.config import load_recipe

    spec = HeadSpec(in_dim=64, out_dim=256, depth=1, activation="identity", norm=None, last_norm="batch")
    path = tmp_path / "best_head.json"
    spec.to_json(path, found_on={"backbone": "tiny", "d": 64, "steps": 100, "epochs": 2.5, "n_train": 2000})
    cfg = load_recipe(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml", [f'head.file="{path}"'])  # w16: d = 128, 6 epochs
    note = _rescale_note(cfg, str(path))
    assert "found on d=64 features; this backbone gives d=128" in note
    assert "linear 64->256 last_norm=batch whiten=none -> linear 128->512 last_norm=batch whiten=none" in note
    assert "bigger on width, budget, data: re-check" in note
    assert cfg.head.resolve("barlow", 128) == spec.rescale(128)
    same = tmp_path / "same.json"
    spec.rescale(128).to_json(same, found_on={"d": 128, "epochs": 6, "n_train": 10000})
    assert _rescale_note(load_recipe(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml", [f'head.file="{same}"']), str(same)) is None


def test_a_verdict_at_the_users_schedule_counts_as_the_budget_it_was_decided_on(tmp_path):
    from geohead.commands.train import _rescale_note
    from geohead.training.config import load_recipe

    spec = HeadSpec(in_dim=128, out_dim=512, depth=1, activation="identity", norm=None, last_norm="batch")
    recipe = ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml"          # w16: d = 128, 6 epochs, 10k images
    short, long = tmp_path / "short.json", tmp_path / "long.json"
    spec.to_json(short, found_on={"d": 128, "steps": 20, "epochs": 0.5, "n_train": 10000})
    spec.to_json(long, found_on={"d": 128, "steps": 20, "epochs": 0.5, "n_train": 10000, "verdict_epochs": 6.0})
    note = _rescale_note(load_recipe(recipe, [f'head.file="{short}"']), str(short))
    assert "0.5 epochs of 10,000 images; this run is bigger on budget: re-check" in note
    assert _rescale_note(load_recipe(recipe, [f'head.file="{long}"']), str(long)) is None


def test_a_verdict_on_the_users_backbone_counts_as_the_width_it_was_decided_on(tmp_path):
    from geohead.commands.train import _rescale_note
    from geohead.training.config import load_recipe

    spec = HeadSpec(in_dim=32, out_dim=128, depth=1, activation="identity", norm=None, last_norm="batch")
    recipe = ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml"          # w16: d = 128, 6 epochs, 10k images
    narrow, checked = tmp_path / "narrow.json", tmp_path / "checked.json"
    proxy = {"backbone": "tiny", "d": 32, "steps": 100, "epochs": 6.0, "n_train": 10000}
    spec.to_json(narrow, found_on=proxy)
    spec.to_json(checked, found_on=proxy | {"verdict_backbone": "resnet18_w16", "verdict_d": 128})
    note = _rescale_note(load_recipe(recipe, [f'head.file="{narrow}"']), str(narrow))
    assert "this run is bigger on width: re-check" in note
    note = _rescale_note(load_recipe(recipe, [f'head.file="{checked}"']), str(checked))
    assert note == ("head: " + str(checked) + " was found on d=32 features; this backbone gives d=128, so its widths "
                    "keep the same multiples of d: linear 32->128 last_norm=batch whiten=none -> linear 128->512 "
                    "last_norm=batch whiten=none")                       # rescaled, but width is not left to re-check


def test_a_run_on_the_whole_training_set_counts_its_images_against_the_proxys(tmp_path):
    import dataclasses

    from geohead.commands.train import _rescale_note
    from geohead.training.config import load_recipe

    spec = HeadSpec(in_dim=128, out_dim=512, depth=1, activation="identity", norm=None, last_norm="batch")
    path = tmp_path / "best_head.json"
    spec.to_json(path, found_on={"d": 128, "steps": 100, "epochs": 6.0, "n_train": 2000})
    cfg = load_recipe(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml", [f'head.file="{path}"'])
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, n_train=None))    # shapes: 10,000 by default
    assert "2,000 images; this run is bigger on data: re-check" in _rescale_note(cfg, str(path))


@pytest.mark.parametrize("case", ["unknown backbone", "rescaled over the width limit", "too wide for a k x k loss"])
def test_train_with_a_head_fails_cleanly_before_training(tmp_path, case):
    from click.testing import CliRunner

    from geohead.cli import main

    path = tmp_path / "best_head.json"
    args = ["train", "barlow_shapes_cpu", "--head", str(path), "--out", str(tmp_path / "run"), "--set", "optim.max_steps=1"]
    if case == "unknown backbone":
        HeadSpec(in_dim=128, out_dim=512, depth=1, activation="identity", norm=None).to_json(path, found_on={"d": 128})
        args += ["--set", 'backbone.name="resnet18_nosuch"']
        match = "resnet18_nosuch"
    elif case == "rescaled over the width limit":  # found on d = 16 at 2^18 wide: on d = 128 that is 2^21 > MAX_DIM
        HeadSpec(in_dim=16, out_dim=1 << 18, depth=1, activation="identity", norm=None).to_json(path)
        match = "out_dim"
    else:              # 2^20 on d = 128 is within MAX_DIM, but Barlow Twins' 2^20 x 2^20 matrix is 4 TiB
        HeadSpec(in_dim=16, out_dim=1 << 17, depth=1, activation="identity", norm=None).to_json(path)
        match = "out_dim 1,048,576 needs 4,096 GiB for each; give an out_dim of at most 32,768"
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output, r.output
