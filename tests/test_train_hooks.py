"""Training hooks the paper's experiments need: head.init_scale, data.view_args, train(callback=...)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from geohead.training.checkpoint import load_checkpoint
from geohead.training.config import ConfigError, config_from_dict

TINY = {
    "objective": "simsiam",
    "data": {"name": "shapes", "n_train": 128, "n_test": 64},
    "head": {"spec": {"hidden_dim": 32, "out_dim": 32}, "predictor": {"hidden_dim": 8}},
    "optim": {"name": "sgd", "lr": 0.05, "batch_size": 64, "epochs": 2, "warmup_epochs": 0},
    "track": {"progress": False, "monitor_every": 0},
    "probe": {"enabled": False},
}


def _cfg(tmp_path=None, **changes):
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in TINY.items()}
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            d.setdefault(section, {})[name] = value
        else:
            d[section] = value
    if tmp_path is not None:
        d["out"] = str(tmp_path / "run")
    return config_from_dict(d)


def test_init_scale_multiplies_head_linear_weights_only() -> None:
    from geohead.training.model import build_models

    torch.manual_seed(0)
    ref, *_ = build_models(_cfg())
    torch.manual_seed(0)
    small, *_ = build_models(_cfg(head__init_scale=0.1))
    n = 0
    for (name, a), (_, b) in zip(ref.head.named_modules(), small.head.named_modules()):
        if isinstance(a, nn.Linear):
            torch.testing.assert_close(b.weight, 0.1 * a.weight, rtol=0, atol=0)
            if a.bias is not None:
                torch.testing.assert_close(b.bias, a.bias, rtol=0, atol=0)
            n += 1
    assert n == 3  # the SimSiam projector has three Linear layers
    for a, b in zip(ref.predictor.parameters(), small.predictor.parameters()):
        assert torch.equal(a, b)  # the predictor is left as built
    for a, b in zip(ref.backbone.parameters(), small.backbone.parameters()):
        assert torch.equal(a, b)


def test_bad_init_scale_and_view_args_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"head.init_scale must be > 0"):
        _cfg(head__init_scale=0.0)
    with pytest.raises(ConfigError, match=r"\[data.view_args\]: unknown ViewSpec fields \['rotaton'\]"):
        _cfg(data__view_args={"rotaton": 45})
    with pytest.raises(ConfigError, match=r"\[data.view_args\]: .*flip_p is a probability"):
        _cfg(data__view_args={"flip_p": 2.0})
    cfg = _cfg(data__view_args={"rotation": 45.0, "gray_p": 0.0})
    assert cfg.data.view_args == {"rotation": 45.0, "gray_p": 0.0}


def test_callback_sees_every_epoch_and_the_view_args(tmp_path) -> None:
    """With every random view operation switched off by view_args the two views are the same image;
    the callback runs before the first update and after each epoch, on the checkpointed weights."""
    from geohead.training.loop import train

    identity_views = {"crop_scale": [1.0, 1.0], "crop_ratio": [1.0, 1.0], "flip_p": 0.0, "jitter_p": 0.0,
                      "gray_p": 0.0}
    cfg = _cfg(tmp_path, data__view_args=identity_views)
    seen = []

    def callback(info) -> None:
        assert info.model.training
        assert len(info.views) == 2 and torch.equal(info.views[0], info.views[1])
        head = {k: v.clone() for k, v in info.model.state_dict().items()}
        seen.append((info.epoch, info.step, head, info.out_dir))
        info.model.eval()  # train() must put the student back in train mode

    train(cfg, callback=callback)
    assert [(e, s) for e, s, _, _ in seen] == [(0, 0), (1, 2), (2, 4)]
    assert all(d == tmp_path / "run" for *_, d in seen)
    ck = load_checkpoint(tmp_path / "run" / "last.safetensors")
    final = seen[-1][2]
    for key, value in ck.section("model").items():
        assert torch.equal(final[key], value), key
    assert not torch.equal(seen[0][2]["head.mlp.fc0.weight"], final["head.mlp.fc0.weight"])

    # a resumed (already complete) run does not call the epoch-0 hook again
    again = []
    train(cfg, callback=lambda info: again.append(info.epoch))
    assert again == []
