"""GeometryMonitor: forward hooks record the library's own measurements of the right tensors."""
from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from geohead import GeometricHead
from geohead.geometry import EffectiveHessian, alpha_req, normalized_std, rankme, spectrum_summary
from geohead.monitor import GeometryMonitor
from geohead.objectives import get_objective

pytestmark = pytest.mark.usefixtures("one_thread")


def _modules(seed: int = 0) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
    head = GeometricHead(8, 6, hidden_dim=16)
    return backbone, head


def _expected(feats: torch.Tensor, embs: torch.Tensor) -> dict[str, float]:
    out = {}
    for name, x in (("backbone", feats), ("head", embs)):
        x = x.detach().float()
        out.update({f"rankme_{name}": rankme(x), f"std_{name}": normalized_std(x),
                    f"alpha_req_{name}": alpha_req(x), f"std_healthy_{name}": 1 / math.sqrt(x.shape[1])})
    return out


def test_records_the_library_measurements_of_the_forward_batch():
    backbone, head = _modules()
    monitor = GeometryMonitor(backbone, head, every=1)
    x = torch.randn(24, 3, 8, 8)
    f = backbone(x).flatten(1)
    z = head(f)
    (rec,) = monitor.history
    assert rec["step"] == 1 and rec["batch"] == 24
    for k, v in _expected(f, z).items():
        assert rec[k] == v, k
    assert set(rec) >= {"rankme_backbone", "rankme_head", "std_backbone", "std_head", "alpha_req_backbone",
                        "alpha_req_head", "step"}
    monitor.detach()


def test_counts_steps_of_two_calls_and_records_the_first_view():
    backbone, head = _modules()
    monitor = GeometryMonitor(backbone, head, every=3, calls_per_step=2)
    firsts = {}
    for step in range(1, 7):
        x0, x1 = torch.randn(16, 3, 8, 8), torch.randn(16, 3, 8, 8)
        f0, f1 = backbone(x0), backbone(x1)  # both backbone calls before the head calls
        z0, z1 = head(f0.flatten(1)), head(f1.flatten(1))
        firsts[step] = (f0.flatten(1), z0)
        head.eval()
        with torch.no_grad():
            head(f0.flatten(1))  # evaluation forwards are not counted
        head.train()
    assert [r["step"] for r in monitor.history] == [3, 6]
    for rec in monitor.history:
        f, z = firsts[rec["step"]]
        for k, v in _expected(f, z).items():
            assert rec[k] == v, (rec["step"], k)
    monitor.detach()


def test_detach_removes_the_hooks_and_context_manager_detaches():
    backbone, head = _modules()
    n_bb, n_head = len(backbone._forward_hooks), len(head._forward_hooks)
    with GeometryMonitor(backbone, head, every=1) as monitor:
        assert len(backbone._forward_hooks) == n_bb + 1 and len(head._forward_hooks) == n_head + 1
        head(backbone(torch.randn(8, 3, 8, 8)).flatten(1))
    assert not monitor.attached
    assert len(backbone._forward_hooks) == n_bb and len(head._forward_hooks) == n_head
    head(backbone(torch.randn(8, 3, 8, 8)).flatten(1))
    assert len(monitor.history) == 1


def test_hessian_record_equals_spectrum_summary_on_the_two_halves():
    backbone, head = _modules()
    objective = get_objective("barlow")
    monitor = GeometryMonitor(backbone, head, every=1, objective=objective, hessian_every=2, hessian_samples=6,
                              hessian_iters=8)
    x = torch.randn(20, 3, 8, 8)
    head(backbone(x).flatten(1))  # first record: no Hessian (the 2nd, 4th, ... records hold one)
    torch.manual_seed(5)
    f = backbone(x).flatten(1)
    head(f)  # the hook measures H_eff with the running statistics this forward left
    torch.manual_seed(5)
    eh = EffectiveHessian(head, objective, f[:6].detach(), f[10:16].detach(), bn_mode="eval")
    s = spectrum_summary(eh, mode="fast", max_iter=8)
    first, second = monitor.history
    assert second["hessian_lambda_min"] == s.lambda_min and second["hessian_lambda_max"] == s.lambda_max
    assert second["m_over_h"] == s.m_over_h and second["hessian_num_negative"] == s.num_negative
    assert "hessian_lambda_min" not in first
    monitor.detach()


def test_hessian_of_two_calls_uses_both_views_and_a_plain_loss_function():
    backbone, head = _modules()

    def loss_fn(a, b):  # any loss(a, b) -> scalar, e.g. lightly's
        return ((a - b) ** 2).sum(1).mean() + (a.T @ a / len(a) - torch.eye(a.shape[1], dtype=a.dtype)).pow(2).sum()

    monitor = GeometryMonitor(backbone, head, every=1, calls_per_step=2, objective=loss_fn, hessian_every=1,
                              hessian_samples=5)
    x0, x1 = torch.randn(8, 3, 8, 8), torch.randn(8, 3, 8, 8)
    f0, f1 = backbone(x0).flatten(1), backbone(x1).flatten(1)
    torch.manual_seed(3)
    head(f0)
    assert monitor.history == []  # waits for the second view
    head(f1)
    (rec,) = monitor.history

    class Obj(nn.Module):
        def loss(self, a, b):
            return loss_fn(a, b)

    torch.manual_seed(3)
    s = spectrum_summary(EffectiveHessian(head, Obj(), f0[:5].detach(), f1[:5].detach()), mode="fast", max_iter=10)
    assert rec["hessian_lambda_min"] == s.lambda_min and rec["m_over_h"] == s.m_over_h
    monitor.detach()


def test_files_and_tensorboard(tmp_path):
    backbone, head = _modules()

    class Writer:
        def __init__(self):
            self.calls = []

        def add_scalar(self, tag, value, global_step):
            self.calls.append((tag, value, global_step))

        def flush(self):
            pass

    writer = Writer()
    monitors = [GeometryMonitor(backbone, head, every=2, log_file=tmp_path / "m.jsonl", tensorboard=writer),
                GeometryMonitor(backbone, head, every=2, log_file=tmp_path / "m.csv"),
                GeometryMonitor(backbone, head, every=2, tensorboard=tmp_path / "tb")]
    for _ in range(4):
        head(backbone(torch.randn(8, 3, 8, 8)).flatten(1))
    for m in monitors:
        m.detach()
    history = monitors[0].history
    assert [r["step"] for r in history] == [2, 4] and all(r["monitor_seconds"] > 0 for r in history)

    def values(h):
        return [{k: v for k, v in r.items() if k != "monitor_seconds"} for r in h]

    assert values(monitors[1].history) == values(history)
    assert [json.loads(line) for line in open(tmp_path / "m.jsonl")] == history
    rows = list(csv.DictReader(open(tmp_path / "m.csv")))
    assert [float(r["rankme_head"]) for r in rows] == [r["rankme_head"] for r in history]
    assert "loss" in rows[0]  # log_loss's mean has a column (it was left out of the CSV)
    assert ("geometry/rankme_head", history[1]["rankme_head"], 4) in writer.calls
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tb").iterdir())


def test_non_finite_embeddings_give_nan_not_an_error():
    backbone, head = _modules()
    with GeometryMonitor(backbone, head, every=1) as monitor:
        head(torch.full((8, 8), float("nan")))
    assert math.isnan(monitor.history[0]["rankme_head"]) and math.isnan(monitor.history[0]["std_backbone"])


def test_bad_arguments_say_what_to_pass():
    backbone, head = _modules()
    with pytest.raises(ValueError, match="objective="):
        GeometryMonitor(backbone, head, hessian_every=2)
    with pytest.raises(ValueError, match=".jsonl or .csv"):
        GeometryMonitor(backbone, head, log_file="m.txt")
    for kw, needle in (({"max_samples": 0}, "max_samples must be a whole number >= 1, got 0"),
                       ({"hessian_samples": 0}, "hessian_samples must be"), ({"hessian_iters": -1}, "hessian_iters must be"),
                       ({"hessian_samples": 5000}, "hessian_samples=5000 is above the bound of 1,024"),
                       ({"every": 2.5}, "every must be a whole number")):
        with pytest.raises(ValueError, match=needle):  # before: max_samples=0 raised inside the hook, mid-training
            GeometryMonitor(backbone, head, **kw)
    assert not backbone._forward_hooks and not head._forward_hooks


def test_importing_geohead_loads_no_optional_framework():
    code = ("import sys, geohead, geohead.monitor, geohead.integrations; "
            "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'lightly', 'torch.utils.tensorboard', "
            "'tensorboard') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_history_keeps_the_latest_max_history_records_and_the_file_every_record(tmp_path):
    """A long run's history is bounded: the oldest records leave it, the log file keeps them all,
    ``records`` counts them all, and the Hessian cadence follows the total count."""
    backbone, head = _modules()
    objective = get_objective("barlow")
    log = tmp_path / "geometry.jsonl"
    monitor = GeometryMonitor(backbone, head, every=1, max_history=3, objective=objective, hessian_every=2,
                              hessian_samples=4, log_file=log)
    for _ in range(7):
        head(backbone(torch.randn(16, 3, 8, 8)).flatten(1))
    monitor.detach()
    assert monitor.records == 7
    assert [r["step"] for r in monitor.history] == [5, 6, 7]
    lines = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [ln["step"] for ln in lines] == list(range(1, 8))
    assert [("hessian_lambda_min" in ln) for ln in lines] == [False, True, False, True, False, True, False]
    assert [("hessian_lambda_min" in r) for r in monitor.history] == [False, True, False]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_history_must_be_a_whole_number(bad):
    backbone, head = _modules()
    with pytest.raises(ValueError, match=f"max_history must be a whole number >= 1, got {bad!r}"):
        GeometryMonitor(backbone, head, max_history=bad)
