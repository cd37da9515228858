"""Cross-process losses: 2 gloo processes on a split batch equal one process on the whole batch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
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
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
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
