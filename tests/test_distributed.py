"""Cross-process losses: 2 gloo processes on a split batch equal one process on the whole batch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from geohead.objectives import OBJECTIVES

sys.path.insert(0, str(Path(__file__).parent / "workers"))
import dist_losses  # noqa: E402

NAMES = sorted(OBJECTIVES)


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "0",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0",
           str(Path(__file__).parent / "workers" / "dist_losses.py"), str(out), ",".join(NAMES)]
    for _ in range(3):
        for f in out.iterdir():
            f.unlink()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        if proc.returncode == 0 or "terminate called without an active exception" not in proc.stderr:
            break
        # a rank aborted at start-up (seen under load on the 2-core machine, twice in a row once;
        # the same test passes alone): launch again after a pause, then judge
        time.sleep(3.0)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("name", NAMES)
def test_two_process_loss_and_gradients_equal_single_process(name: str, two_process_results) -> None:
    single_loss, single = dist_losses.run(name, dist_losses.batch(), lambda h: h)
    for rank_result in two_process_results:
        r = rank_result[name]
        assert abs(r["loss_mean"] - single_loss) < 1e-6 * max(1.0, abs(single_loss))
        for key, want in single.items():  # parameter gradients, and DINO's centre
            got = torch.tensor(r["grads"][key], dtype=torch.float64)
            want_t = torch.tensor(want, dtype=torch.float64)
            assert torch.allclose(got, want_t, atol=1e-6 * max(1.0, float(want_t.abs().max())), rtol=0), key
    if name in ("simclr", "barlow", "vicreg"):
        # global-batch objectives: every rank computes the same global loss
        assert abs(two_process_results[0][name]["loss"] - two_process_results[1][name]["loss"]) < 1e-12


ROOT = Path(__file__).resolve().parents[1]


def test_torchrun_recipe_equals_single_process(tmp_path) -> None:
    """2 processes (gloo, sharded views, global-batch loss) reproduce one process's first loss.

    BatchNorm statistics are per process unless SyncBatchNorm (CUDA only) joins them, so the
    equality is tested with a model that has no batch coupling: a small ViT and a LayerNorm head.
    """
    from geohead.training.checkpoint import load_checkpoint
    from geohead.training.config import load_recipe
    from geohead.training.loop import train

    recipe = ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml"
    sets = ["data.n_train=256", "optim.batch_size=64", "optim.max_steps=2", "head.spec.hidden_dim=64",
            "track.log_every=1", "track.monitor_every=2", "track.progress=false", "probe.enabled=false",
            'backbone.name="vit_tiny_cifar"', "backbone.args={depth=2, embed_dim=64, num_heads=2}",
            'head.spec.norm="layer"']
    dist_out, single_out = tmp_path / "dist", tmp_path / "single"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
           "--rdzv_endpoint", "127.0.0.1:0", "-m", "geohead.cli", "train", str(recipe), "--out", str(dist_out)]
    cmd += [a for s in sets for a in ("--set", s)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    train(load_recipe(recipe, sets + [f'out="{single_out}"']))

    def curve(run: Path) -> dict[int, float]:
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in rows if "loss" in r}

    d, s = curve(dist_out), curve(single_out)
    assert sorted(d) == [1, 2]
    assert abs(d[1] - s[1]) <= 1e-5 * abs(s[1]), (d[1], s[1])
    # rank 0 alone writes: one checkpoint, no stray temp files
    assert sorted(p.name for p in dist_out.iterdir() if p.suffix == ".safetensors" or p.name.startswith(".")) == ["last.safetensors"]
    ck = load_checkpoint(dist_out)
    assert ck.meta["step"] == 2
    assert not any(".module." in k for k in ck.tensors)  # DDP's wrapper never leaks into the file


@pytest.mark.parametrize("recipe", ["simclr", "dino"])
def test_sharded_views_equal_the_global_batch_views(recipe: str) -> None:
    from geohead.data import make_view_fn

    views = make_view_fn(recipe, 32)
    x = torch.randint(0, 256, (12, 3, 32, 32), dtype=torch.uint8)
    full = views(x, torch.Generator().manual_seed(3))
    parts = [views(x[r * 4:(r + 1) * 4], torch.Generator().manual_seed(3), shard=(r, 3)) for r in range(3)]
    assert len(full) == len(parts[0])
    for i, v in enumerate(full):
        assert torch.equal(torch.cat([p[i] for p in parts]), v)
    with pytest.raises(ValueError, match="0 <= rank < world"):
        views(x, torch.Generator().manual_seed(3), shard=(3, 3))
