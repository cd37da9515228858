"""The one probe-split rule: no path fits a probe on an image it scores.

Each path (the search's inputs, ``geohead train``'s probes, ``geohead diagnose`` of a run and
``diagnose_model``) is run on one labelled .npz without a test source, with the probe spied on:
no test feature row may equal a train feature row (the file's images are all distinct, and the
models are deterministic in eval mode, so a shared image gives an equal row)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from geohead.probes.splits import SPLIT_SOURCES, held_out_indices, probe_split
from tiny_runs import tiny_run


@pytest.fixture(scope="module")
def one_file(tmp_path_factory) -> Path:
    """120 distinct labelled shapes images in one .npz (the layout of ../shared/data)."""
    from geohead.data import load_dataset

    d = load_dataset("shapes", n=120, seed=7)
    flat = d.images.flatten(1)
    assert torch.unique(flat, dim=0).shape[0] == len(d)  # all distinct: a shared row means a shared image
    path = tmp_path_factory.mktemp("data") / "one.npz"
    np.savez(path, images=d.images.permute(0, 2, 3, 1).numpy(), labels=d.labels.numpy())
    return path


def shared_rows(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many rows of (M, D) ``b`` equal some row of (N, D) ``a``."""
    return int((torch.cdist(b.double().flatten(1), a.double().flatten(1), compute_mode="donot_use_mm_for_euclid_dist") == 0).any(1).sum())


@pytest.fixture
def spy(monkeypatch) -> list:
    """Records the (backbone_train, backbone_test) features of every guillotine report."""
    import geohead.probes as probes

    seen, real = [], probes.guillotine_report

    def record(fb_tr, fh_tr, fb_te, fh_te, *args, **kw):
        seen.append((fb_tr, fb_te))
        return real(fb_tr, fh_tr, fb_te, fh_te, *args, **kw)

    monkeypatch.setattr(probes, "guillotine_report", record)
    return seen


def test_held_out_indices_are_disjoint_and_sized_by_the_rule() -> None:
    tr, te = held_out_indices(100, 50, 40, seed=3)
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(3))
    assert torch.equal(te, perm[:33].sort().values) and torch.equal(tr, perm[33:83].sort().values)  # test ≤ N // 3
    assert not set(tr.tolist()) & set(te.tolist())
    tr, te = held_out_indices(100, None, 10, seed=3)
    assert len(te) == 10 and len(tr) == 90 and not set(tr.tolist()) & set(te.tolist())
    with pytest.raises(ValueError, match="at least 3 images"):
        held_out_indices(2, None, None, seed=0)


def test_the_rule_names_its_split_sources_as_the_data_does() -> None:
    from geohead.data import DATASET_NAMES

    assert SPLIT_SOURCES == DATASET_NAMES


def test_a_file_is_split_a_test_source_used_as_given(one_file) -> None:
    from geohead.data import load_dataset

    def load(name, train, n):
        return load_dataset(name, train=train, n=n, seed=0)

    split = probe_split(str(one_file), None, load, n_train=60, n_test=30, seed=1)
    assert split.held_out and (len(split.train), len(split.test)) == (60, 30)
    assert shared_rows(split.train.images, split.test.images) == 0
    assert "held out" in split.note() and split.to_dict()["held_out"] is True
    same = probe_split(str(one_file), str(one_file), load, n_train=60, n_test=30, seed=1)  # the same file twice
    assert same.held_out and shared_rows(same.train.images, same.test.images) == 0
    given = probe_split(str(one_file), "shapes", load, n_train=60, n_test=30, seed=1)
    assert not given.held_out and given.test_source == "shapes" and len(given.test) == 30
    assert torch.equal(given.train.images, load(str(one_file), True, 60).images)  # the first n_train, as before


def test_the_search_probes_on_disjoint_parts(one_file) -> None:
    from geohead.search import inputs
    from geohead.search.config import SearchConfig

    cfg = SearchConfig(objective="barlow", data=str(one_file), batch_size=32, probe_train=60, probe_test=30, seed=2)
    notes = []
    tr, te = inputs._probe_splits(cfg, inputs._training_data(cfg), notes.append)
    assert len(te) == 30 and shared_rows(tr.images, te.images) == 0 and "held-out" in notes[0]


def test_train_probes_on_disjoint_parts(one_file, spy) -> None:
    from geohead.data import load_dataset
    from geohead.training.config import load_recipe
    from geohead.training.evaluate import run_probes
    from geohead.training.model import build_models, training_data

    root = Path(__file__).resolve().parents[1]
    cfg = load_recipe(root / "geohead" / "recipes" / "barlow_shapes_cpu.toml",
                      [f'data.name="{one_file}"', "probe.n_train=60", "probe.n_test=30", "probe.linear=false"])
    model, *_ = build_models(cfg)
    out = run_probes(cfg, model.eval(), training_data(cfg), torch.device("cpu"), load_dataset)
    (fb_tr, fb_te), = spy
    assert out["split"]["held_out"] and len(fb_te) == 30 and shared_rows(fb_tr, fb_te) == 0


def test_diagnose_of_a_run_probes_on_disjoint_parts(one_file, spy, tmp_path_factory, tmp_path) -> None:
    from geohead.diagnose import DiagnoseSettings, diagnose

    run = tiny_run(tmp_path_factory, "barlow")
    s = DiagnoseSettings(data=str(one_file), n_test=30, n_train=60, n_orbit_images=2, hessian_samples=4,
                         collapse_batch=4, refine=0, mode="fast", families=("rotate",), linear=False)
    report = diagnose(run, s)
    (fb_tr, fb_te), = spy
    assert report["data"]["probe_split"]["held_out"] and len(fb_te) == 30 and shared_rows(fb_tr, fb_te) == 0


def test_diagnose_model_probes_on_disjoint_parts(one_file, spy) -> None:
    from geohead import diagnose_model
    from geohead.diagnose import DiagnoseSettings

    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
    head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 32))
    s = DiagnoseSettings(n_test=30, n_train=60, n_orbit_images=2, hessian_samples=4, collapse_batch=4, refine=0,
                         mode="fast", families=("rotate",), linear=False)
    report = diagnose_model(backbone, head, "barlow", data=str(one_file), img_size=16, settings=s)
    (fb_tr, fb_te), = spy
    assert report["data"]["probe_split"]["held_out"] and len(fb_te) == 30 and shared_rows(fb_tr, fb_te) == 0
