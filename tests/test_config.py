"""Recipes: parsing, overrides, and errors that name the key and the allowed values."""
from __future__ import annotations

import pytest

from geohead.training.config import ConfigError, TrainConfig, apply_overrides, config_from_dict, load_recipe, parse_override


def test_defaults_validate_and_round_trip() -> None:
    cfg = config_from_dict({})
    assert isinstance(cfg, TrainConfig) and cfg.objective == "barlow"
    again = config_from_dict(cfg.to_dict())
    assert again == cfg


def test_recipe_file_and_overrides(tmp_path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('objective = "simclr"\n[optim]\nlr = 0.5\nepochs = 3\n[head.spec]\nhidden_dim = 64\n')
    cfg = load_recipe(path, ["optim.lr=0.1", "head.spec.activation=gelu", "data.name=../shared/x.npz", "seed=3"])
    assert cfg.objective == "simclr" and cfg.optim.lr == 0.1 and cfg.optim.epochs == 3.0
    assert cfg.head.spec == {"hidden_dim": 64, "activation": "gelu"}
    assert cfg.data.name == "../shared/x.npz" and cfg.seed == 3
    spec = cfg.head.resolve("simclr", 32)
    assert (spec.in_dim, spec.hidden_dim, spec.activation, spec.out_dim) == (32, 64, "gelu", 128)


@pytest.mark.parametrize("recipe,message", [
    ({"objectiv": "barlow"}, r"unknown key 'objectiv' \(did you mean 'objective'\?\)"),
    ({"optim": {"lrr": 0.1}}, r"unknown key 'optim.lrr' \(did you mean 'optim.lr'\?\); valid keys here are \[.*'lr'"),
    ({"optim": {"lr": "fast"}}, r"optim.lr = 'fast' has the wrong type; expected float"),
    ({"optim": {"name": "adam"}}, r"optim.name = 'adam' is not allowed; choose one of \['lars', 'sgd', 'adamw'\]"),
    ({"objective": "moco"}, r"objective = 'moco' is not allowed; choose one of"),
    ({"optim": {"lr": -1.0}}, r"optim.lr must be > 0"),
    ({"head": {"spec": {"widht": 3}}}, r"\[head\]: unknown preset overrides \['widht'\]"),
    ({"head": {"spec": {"activation": "swishy"}}}, r"\[head\]: unknown activation 'swishy'"),
    ({"objective_args": {"temperature": 0.1}}, r"\[objective_args\]: objective 'barlow' has no hyper-parameter"),
    ({"data": {"views": "mocov3"}}, r"data.views = 'mocov3' is not allowed"),
    ({"data": "cifar10"}, r"data must be a table of keys"),
    ({"head": {"file": "/nonexistent/head.json"}}, r"head.file '/nonexistent/head.json' does not exist"),
    ({"track": {"hessian_iters": 1001}}, r"track.hessian_iters=1001 is above the bound of 1,000; give at most 1,000"),
    ({"track": {"hessian_samples": 1025}}, r"track.hessian_samples=1025 is above the bound of 1,024"),
])
def test_bad_recipes_name_the_key(recipe: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(recipe)


def test_hessian_sizes_are_bounded_at_the_bounds_themselves() -> None:
    """H_eff's batch and Lanczos steps: accepted at the bounds, refused one above (recipes and diagnose alike)."""
    from geohead.diagnose import DiagnoseSettings

    cfg = config_from_dict({"track": {"hessian_iters": 1000, "hessian_samples": 1024}})
    assert (cfg.track.hessian_iters, cfg.track.hessian_samples) == (1000, 1024)
    DiagnoseSettings(hessian_samples=1024, collapse_batch=1024, density_steps=1000, density_probes=1000).validate()
    for key, value in (("hessian_samples", 1025), ("collapse_batch", 1025), ("density_steps", 1001), ("density_probes", 1001)):
        with pytest.raises(ValueError, match=f"{key}={value} is above the bound of {value - 1:,}; give at most {value - 1:,}"):
            DiagnoseSettings(**{key: value}).validate()


def test_settings_that_worked_before_the_bounds_still_validate() -> None:
    """0 turns clipping off; factor bins are only checked where the factor probes run."""
    assert config_from_dict({"optim": {"grad_clip": 0.0}}).optim.grad_clip == 0.0
    assert config_from_dict({"probe": {"enabled": False, "factor_bins": 1}}).probe.factor_bins == 1
    assert config_from_dict({"probe": {"factors": False, "factor_bins": 10 ** 6}}).probe.factor_bins == 10 ** 6
    with pytest.raises(ConfigError, match=r"probe.factor_bins must be from 2 to 100 \(probe.n_train\), got 101"):
        config_from_dict({"probe": {"n_train": 100, "factor_bins": 101}})


def test_override_parsing() -> None:
    assert parse_override("optim.lr=1e-3") == (["optim", "lr"], 1e-3)
    assert parse_override("probe.enabled=false") == (["probe", "enabled"], False)
    assert parse_override("data.name=cifar10") == (["data", "name"], "cifar10")
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("optim.lr")
    with pytest.raises(ConfigError, match="is not a table"):
        apply_overrides({"seed": 1}, ["seed.x=2"])


def test_missing_and_invalid_recipe_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_recipe(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("objective = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_recipe(bad)


@pytest.mark.parametrize("objective", ["byol", "simsiam"])
def test_predictor_is_the_methods_whatever_the_head(objective: str) -> None:
    """The predictor is the method's published one (ReLU) for a smooth head and a ReLU head alike
    (the search's trials and the published head's runs must share it); the
    ``head.predictor`` overrides still swap its activation."""
    specs = {}
    for smooth in (True, False):
        cfg = config_from_dict({"objective": objective, "head": {"smooth": smooth}})
        head = cfg.head.resolve(objective, 64)
        assert head.activation == ("silu" if smooth else "relu")
        specs[smooth] = cfg.head.resolve_predictor(objective, head.output_dim)
    assert specs[True] == specs[False] and specs[True].activation == "relu"
    silu = config_from_dict({"objective": objective, "head": {"predictor": {"activation": "silu"}}})
    assert silu.head.resolve_predictor(objective, 32).activation == "silu"
    assert config_from_dict({"objective": "barlow"}).head.resolve_predictor("barlow", 32) is None


def test_search_score_choices_and_multi() -> None:
    """--score takes theory (the default), geometry or knn; --multi optimises the label-free
    criteria and picks by a label-free score, so it refuses knn."""
    from geohead.search import SearchConfig, SearchError

    assert SearchConfig().score == "theory"
    for score in ("geometry", "theory", "knn"):
        SearchConfig(score=score).validate()
    with pytest.raises(SearchError, match=r"unknown score 'rank'.*'theory'"):
        SearchConfig(score="rank").validate()
    for score in ("theory", "geometry"):
        SearchConfig(score=score, multi=True).validate()
    with pytest.raises(SearchError, match="drop --score knn or --multi"):
        SearchConfig(score="knn", multi=True).validate()


def test_the_cli_default_score_is_the_library_default() -> None:
    """`geohead search` without --score and SearchConfig() score the same way (DEFAULT_SCORE)."""
    from geohead.commands.search import search
    from geohead.search import SearchConfig
    from geohead.search.score import DEFAULT_SCORE, LABEL_FREE_SCORES

    option = next(p for p in search.params if p.name == "score")
    assert option.default == SearchConfig().score == DEFAULT_SCORE == "theory"
    assert LABEL_FREE_SCORES[DEFAULT_SCORE] == {"rankme": 1.0, "conditioning": 1.0, "fisher_erank": 1.0}


def test_an_out_folder_with_a_tilde_is_the_one_its_check_sees(tmp_path, monkeypatch) -> None:
    """folder_problem checks ``~/x`` at $HOME/x; the run and the search wrote to a literal ``./~/x``."""
    from geohead.search import SearchConfig

    monkeypatch.setenv("HOME", str(tmp_path))
    assert TrainConfig(out="~/runs/x").out_dir == tmp_path / "runs" / "x"
    assert SearchConfig(out="~/s").out_dir == tmp_path / "s"
    assert TrainConfig(out="runs/x").out_dir.as_posix() == "runs/x"  # a relative folder stays relative
