"""The smallest real thing geohead does: build heads, whiten one, and compare SSL losses.

Run: python examples/quickstart.py
"""
from __future__ import annotations

import torch

from geohead import GeometricHead
from geohead.objectives import OBJECTIVES, get_objective


def main() -> None:
    torch.manual_seed(0)
    feats = torch.randn(256, 64) @ torch.randn(64, 64)  # stand-in backbone features
    views = feats + 0.1 * torch.randn_like(feats), feats + 0.1 * torch.randn_like(feats)
    print(f"{'objective':10s} {'silu head':>10s} {'relu head':>10s}")
    for name in sorted(OBJECTIVES):
        row = []
        for smooth in (True, False):
            objective = get_objective(name, **({"out_dim": 32} if name == "dino" else {}))
            overrides = {"hidden_dim": 128, "prototypes": 32} if name == "dino" else {"hidden_dim": 128, "out_dim": 32}
            head = GeometricHead.preset(name, 64, smooth=smooth, **overrides)
            if name != "dino":
                head.whiten_(feats)
            e1, e2 = head(views[0]), head(views[1])
            if objective.needs_predictor:
                pred = objective.make_predictor(e1.shape[1], smooth=smooth, hidden_dim=64)
                loss = objective([pred(e1), pred(e2)], [e1, e2])
            elif objective.uses_teacher:
                loss = objective([e1, e2], [e1.detach(), e2.detach()])
            else:
                loss = objective([e1, e2])
            row.append(loss.item())
        print(f"{name:10s} {row[0]:10.4f} {row[1]:10.4f}")


if __name__ == "__main__":
    main()
