"""The Lightning callback and the two examples, with the real lightly and Lightning packages."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("lightning", reason='pip install -e ".[dev]" installs Lightning')
pytest.importorskip("lightly", reason='pip install -e ".[dev]" installs lightly')

import lightning as L  # noqa: E402
from lightning.pytorch.loggers import Logger  # noqa: E402

from geohead import GeometricHead  # noqa: E402
from geohead.geometry import rankme  # noqa: E402
from geohead.integrations.lightning import GeometryCallback  # noqa: E402
from geohead.objectives import get_objective  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # Lightning 2.6's own call of a pytree API that recent torch deprecates
    pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"),
]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SHARED = EXAMPLES.parents[1] / "shared"  # beside the repository: present on the developers' machines, absent on a fresh clone


class _Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(12, 10))
        self.projector = GeometricHead(10, 6, hidden_dim=16)
        self.criterion = get_objective("barlow")
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        (x,) = batch
        f = self.encoder(torch.cat([x, x + 0.1 * torch.randn_like(x)]))
        z = self.projector(f)
        self.seen.append((f.detach(), z.detach()))
        return self.criterion(list(z.chunk(2)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _Capture(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, dict]] = []

    name, version, experiment = "capture", "0", None

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def _fit(callback: GeometryCallback, steps: int) -> tuple[_Module, _Capture]:
    module, logger = _Module(), _Capture()
    data = torch.utils.data.TensorDataset(torch.randn(64, 3, 2, 2))
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=logger, callbacks=[callback],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=1)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=16))
    module.trainer_metrics = dict(trainer.callback_metrics)
    module.trainer_progress_bar = dict(trainer.progress_bar_metrics)
    return module, logger


def test_callback_records_every_n_steps_logs_each_record_once_and_detaches():
    callback = GeometryCallback(every=2, objective="criterion", hessian_every=2)
    module, logger = _fit(callback, steps=5)
    history = callback.monitor.history
    assert [r["step"] for r in history] == [2, 4]  # counted from 1, as GeometryMonitor counts
    for rec in history:  # the values of the step's training forward (step s is batch s - 1)
        f, z = module.seen[rec["step"] - 1]
        assert rec["rankme_backbone"] == rankme(f) and rec["rankme_head"] == rankme(z)
    assert "hessian_lambda_min" not in history[0] and "hessian_lambda_min" in history[1]  # the 2nd record
    assert math.isfinite(history[1]["m_over_h"])
    geometry_rows = [(s, m) for s, m in logger.rows if any(k.startswith("geometry/") for k in m)]
    assert [s for s, _ in geometry_rows] == [2, 4]
    for (_, m), rec in zip(geometry_rows, history):
        assert m["geometry/rankme_head"] == rec["rankme_head"] and m["geometry/std_backbone"] == rec["std_backbone"]
        # constants and timings stay in the history, not in the logged scalars
        assert not any(k.endswith(("seconds", "batch")) or "healthy" in k for k in m)
        assert "monitor_seconds" in rec and "std_healthy_head" in rec
    assert float(module.trainer_metrics["geometry/rankme_head"]) == pytest.approx(history[-1]["rankme_head"])
    assert not callback.monitor.attached
    assert not module.encoder._forward_hooks and not module.projector._forward_hooks


def test_a_second_fit_records_again():
    callback = GeometryCallback(every=2)
    module, _ = _fit(callback, steps=2)
    trainer = L.Trainer(max_steps=4, accelerator="cpu", devices=1, logger=False, callbacks=[callback],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    data = torch.utils.data.TensorDataset(torch.randn(64, 3, 2, 2))
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=16))
    assert [r["step"] for r in callback.monitor.history] == [2] + [2, 4]  # a new Trainer counts from 1 again
    assert not callback.monitor.attached


def test_callback_names_what_to_pass_when_it_finds_no_head():
    class NoHead(_Module):
        def __init__(self):
            super().__init__()
            self.mlp = self.projector
            del self.projector

    callback = GeometryCallback(every=1)
    with pytest.raises(AttributeError, match="head='<attribute name>'"):
        callback.setup(None, NoHead(), "fit")
    callback = GeometryCallback(every=1, head="mlp")
    callback.setup(None, NoHead(), "fit")
    assert callback.monitor.head is not None
    callback.monitor.detach()


def _load(name: str):
    if str(EXAMPLES) not in sys.path:  # the examples import their shared module from their folder
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _quick_command(name: str, out: Path) -> list[str]:
    """The arguments of the ``--quick`` command in the example's docstring (what a new user copies),
    with ``--out`` moved to ``out``."""
    prefix = f"python examples/{name}.py "
    lines = [ln.strip() for ln in (EXAMPLES / f"{name}.py").read_text().split('"""')[1].splitlines()]
    (line,) = [ln for ln in lines if ln.startswith(prefix) and "--quick" in ln.split()]
    args = shlex.split(line[len(prefix):], comments=True)
    i = args.index("--out")
    return args[:i] + args[i + 2:] + ["--out", str(out)]


class _Opened:
    """Paths the process opens while ``recording`` (an audit hook: it sees numpy's and torch's opens too;
    hooks cannot be removed, so it is installed once and idle outside ``with``)."""

    paths: list[str] = []
    recording = False
    installed = False

    def __enter__(self) -> list[str]:
        if not _Opened.installed:
            sys.addaudithook(_Opened._hook)
            _Opened.installed = True
        _Opened.paths, _Opened.recording = [], True
        return _Opened.paths

    def __exit__(self, *exc) -> None:
        _Opened.recording = False

    @staticmethod
    def _hook(event: str, args: tuple) -> None:
        if _Opened.recording and event == "open" and isinstance(args[0], (str, bytes, Path)):
            _Opened.paths.append(os.fsdecode(args[0]))


def _under_shared(paths: list[str]) -> list[str]:
    """The paths under the ../shared folder beside the repository (real CIFAR arrays the examples must not read)."""
    return [p for p in paths if Path(p).resolve().is_relative_to(SHARED)]


def _run_quick(name: str, out: Path, extra: list[str] = ()) -> list[dict]:
    """The docstring's quick command of example ``name`` (plus ``extra``), with every file it opens checked."""
    example = _load(name)
    assert "shared" not in (EXAMPLES / f"{name}.py").read_text().lower()  # no look at ../shared, however named
    with _Opened() as opened:
        history = example.main(_quick_command(name, out) + list(extra))
    assert opened and not _under_shared(opened)
    records = [json.loads(line) for line in (out / "geometry.jsonl").read_text().splitlines()]
    assert records and [r["step"] for r in records] == [r["step"] for r in history]
    assert all(math.isfinite(r["rankme_head"]) and math.isfinite(r["rankme_backbone"]) for r in records)
    return history


def test_lightly_example_quick_command(tmp_path, capsys):
    """lightly's pipeline end to end, as the docstring's quick command runs it: trains on the built-in
    shapes, writes its state_dict, and geohead exports, diagnoses (the head rebuilt exactly from
    lightly's, on shapes too) and reports it."""
    _run_quick("lightly_barlow", tmp_path)
    report = json.loads((tmp_path / "diagnose.json").read_text())
    assert report["data"]["name"] == "shapes" and report["data"]["test"] == "shapes"
    assert report["pretrained"]["layout"] == "lightly" and report["pretrained"]["head_check"]["exact"]
    assert report["data"]["mean"] == pytest.approx([0.485, 0.456, 0.406])  # lightly's ImageNet normalisation, as given
    cfg = json.loads((tmp_path / "export" / "config.json").read_text())
    assert cfg["pretrained_cfg"]["std"] == pytest.approx([0.229, 0.224, 0.225]) and (tmp_path / "export" / "head.json").is_file()
    assert (tmp_path / "report.html").is_file() and (tmp_path / "monitors.png").is_file()  # the monitor JSONL plotted
    out = capsys.readouterr().out
    assert "trained on shapes-train" in out and "$ geohead diagnose" in out and "--data shapes" in out and "the head " in out


def test_lightning_example_quick_command(tmp_path, capsys):
    """Lightning end to end, as the docstring's quick command runs it: the .ckpt Lightning writes is
    exported and diagnosed with no flags for the model (method, head spec, normalisation come from
    its hyper-parameters), on the shapes it trained on."""
    from geohead.data import load_dataset

    _run_quick("lightning_monitor", tmp_path)
    report = json.loads((tmp_path / "diagnose.json").read_text())
    assert report["data"]["name"] == "shapes" and report["data"]["test"] == "shapes"
    assert report["source"]["objective"] == "barlow" and report["source"]["head_spec"]["activation"] == "silu"
    assert report["pretrained"]["head_check"]["exact"]
    cfg = json.loads((tmp_path / "export" / "config.json").read_text())
    args = _quick_command("lightning_monitor", tmp_path)
    shapes = load_dataset("shapes", n=int(args[args.index("--n") + 1]), img_size=32, seed=0)
    assert cfg["pretrained_cfg"]["mean"] == pytest.approx(shapes.mean)  # the training images' own statistics
    assert cfg["geohead"]["provenance"]["objective"] == "barlow"
    out = capsys.readouterr().out
    assert "trained on shapes-train" in out and "--data shapes" in out
    assert len(list(tmp_path.rglob("metrics.csv"))) == 1 and "$ geohead export" in out
    assert (tmp_path / "report.html").is_file() and (tmp_path / "monitors.png").is_file()  # the callback's JSONL


@pytest.mark.parametrize("name", ["lightly_barlow", "lightning_monitor"])
def test_examples_train_and_diagnose_on_the_npz_given(name, tmp_path, capsys):
    """--data PATH.npz (CIFAR-10's layout) replaces shapes in training and in the diagnosis; --data-test too."""
    rng = np.random.default_rng(0)
    train, test = tmp_path / "train.npz", tmp_path / "test.npz"
    for path in (train, test):
        np.savez(path, images=rng.integers(0, 256, (32, 32, 32, 3), dtype=np.uint8), labels=np.arange(32) % 4,
                 classes=np.array(["a", "b", "c", "d"]))
    _run_quick(name, tmp_path / "out", ["--data", str(train), "--data-test", str(test)])
    report = json.loads((tmp_path / "out" / "diagnose.json").read_text())
    assert report["data"]["name"] == str(train) and report["data"]["test"] == str(test)
    out = capsys.readouterr().out
    assert f"trained on {train}" in out and "shapes" not in out.split("$ geohead diagnose")[0]


def test_examples_refuse_an_every_that_records_nothing(capsys):
    with pytest.raises(SystemExit):
        _load("lightly_barlow").parse_args(["--steps", "2", "--every", "10"])
    assert "would record nothing" in capsys.readouterr().err
    assert _load("lightning_monitor").parse_args(["--steps", "2"]).every == 1  # the default fits the run


def test_step_numbers_agree_with_geometry_monitor_and_prog_bar_logs_all_on_request():
    """The same loop under GeometryMonitor(every=2) and GeometryCallback(every=2): the same steps,
    the same values; prog_bar puts the values in the progress bar, log_all logs the constants too."""
    from geohead.monitor import GeometryMonitor

    callback = GeometryCallback(every=2, prog_bar=True, log_all=True)
    module, logger = _fit(callback, steps=4)
    torch.manual_seed(0)
    plain = _Module()
    data = torch.utils.data.TensorDataset(torch.randn(64, 3, 2, 2))
    with GeometryMonitor(plain.encoder, plain.projector, every=2) as monitor:
        for (x,) in torch.utils.data.DataLoader(data, batch_size=16):
            plain.projector(plain.encoder(x))
    assert [r["step"] for r in monitor.history] == [r["step"] for r in callback.monitor.history] == [2, 4]
    rows = [m for _, m in logger.rows if "geometry/rankme_head" in m]
    assert "geometry/std_healthy_head" in rows[0] and "geometry/monitor_seconds" in rows[0]
    assert "geometry/rankme_head" in module.trainer_progress_bar


@pytest.mark.parametrize("every", [2.5, 0, True, "2"])
def test_callback_every_must_be_a_whole_number(every):
    with pytest.raises(ValueError, match=f"GeometryCallback every must be a whole number >= 1, got {every!r}"):
        GeometryCallback(every=every)


def test_callback_logs_every_record_once_when_the_history_drops_old_ones():
    callback = GeometryCallback(every=1, max_history=2)
    module, logger = _fit(callback, steps=5)
    assert [r["step"] for r in callback.monitor.history] == [4, 5] and callback.monitor.records == 5
    geometry_rows = [s for s, m in logger.rows if any(k.startswith("geometry/") for k in m)]
    assert geometry_rows == [1, 2, 3, 4, 5]
