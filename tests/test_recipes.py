"""The recipes ship inside the package: ``geohead train NAME`` finds them from an installed wheel."""
from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from geohead.cli import main
from geohead.training.config import ConfigError, load_recipe, packaged_recipes

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "geohead" / "recipes"


def test_package_data_ships_every_recipe() -> None:
    """pyproject's package-data globs for ``geohead`` match exactly the recipe files, and
    importlib.resources (what an installed wheel reads) finds each of them."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {p for glob in data["geohead"] for p in (ROOT / "geohead").glob(glob)}
    files = set(RECIPES.glob("*.toml"))
    assert len(files) == 18 and shipped == files
    assert not list((ROOT / "recipes").glob("*.toml"))  # no second copy at the top level
    assert packaged_recipes() == sorted(p.stem for p in files)
    for p in files:
        found = resources.files("geohead") / "recipes" / p.name
        assert found.is_file() and found.read_bytes() == p.read_bytes()


def test_a_name_loads_the_packaged_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no recipes folder here: only the package can answer
    by_path = load_recipe(RECIPES / "barlow_shapes_cpu.toml", ["seed=3"])
    assert load_recipe("barlow_shapes_cpu", ["seed=3"]) == by_path
    assert load_recipe("barlow_shapes_cpu.toml", ["seed=3"]) == by_path
    assert load_recipe("dino_vit_tiny_cifar10").objective == "dino"
    own = tmp_path / "barlow_shapes_cpu"  # an existing file of that name wins over the packaged recipe
    own.write_text('objective = "vicreg"\n')
    assert load_recipe("barlow_shapes_cpu").objective == "vicreg"


def test_unknown_names_and_missing_paths_say_what_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"unknown recipe 'barlow_shape'.*'barlow_shapes_cpu'"):
        load_recipe("barlow_shape")
    with pytest.raises(ConfigError, match=r"does not exist; the packaged recipe 'barlow_shapes_cpu' is `geohead train barlow_shapes_cpu`"):
        load_recipe("recipes/barlow_shapes_cpu.toml")  # the old place, from the repository root
    with pytest.raises(ConfigError, match=r"'mine.toml' does not exist$"):
        load_recipe("mine.toml")


def test_cli_train_takes_a_recipe_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`geohead train NAME` resolves the packaged recipe (a bad override shows it was read, with
    nothing trained); an unknown name exits 2 naming the known recipes."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["train", "byol_shapes_cpu", "--set", "optim.name=adam", "--out", "run"])
    assert res.exit_code == 2 and "optim.name = 'adam' is not allowed" in res.output, res.output
    assert not (tmp_path / "run").exists()
    res = CliRunner().invoke(main, ["train", "no_such_recipe"])
    assert res.exit_code == 2 and "unknown recipe 'no_such_recipe'" in res.output
    for name in packaged_recipes():
        assert repr(name) in res.output
    assert "Traceback" not in res.output
