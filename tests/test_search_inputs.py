"""geohead search: every input checked before a study or a folder exists; the progress bar; the
optuna-dashboard hand-off."""
from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner

from geohead.cli import main
from geohead.search import SearchConfig, SearchError, run_search

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_whitening")
#: CLI flags of a one-trial search that takes a few seconds.
TINY_CLI = ["--n-train", "128", "--batch-size", "32", "--steps", "2", "--trials", "1", "--probe-train", "64",
            "--probe-test", "32", "--timeout", "0", "--no-progress"]


def invoke(tmp_path, *args):
    return CliRunner().invoke(main, ["search", "--out", str(tmp_path / "s"), *args])


@pytest.mark.parametrize("args, match", [
    (["--backbone", "resnet999"], "--backbone 'resnet999': unknown backbone 'resnet999'; close matches"),
    (["--set", "optim.lrr=1"], "--set: unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
    (["--set", "optim.lr=fast"], "optim.lr"),
    (["--storage", "foo://host/db"], "unknown storage scheme 'foo'; use sqlite:///path/study.db"),
    (["--storage", "postgres://me@host/db"], "unknown storage scheme 'postgres' (SQLAlchemy spells it postgresql://)"),
    (["--storage", "study.db"], "is neither a database URL nor a journal file"),
    (["--storage", "sqlite:////no/such/folder/study.db"], "folder '/no/such/folder' does not exist; create it first"),
    (["--storage", "journal:/no/such/folder/j.log"], "folder '/no/such/folder' does not exist"),
    (["--data", "/no/such/data.npz"], "--data '/no/such/data.npz': dataset path '/no/such/data.npz' does not exist"),
    (["--data", "shapess"], "unknown dataset 'shapess' (did you mean 'shapes'?)"),
    (["--test", "/no/such/test.npz"], "--test '/no/such/test.npz'"),
    (["--fix", "activation=swishy"], "unknown activation 'swishy'"),
    (["--range", "hidden_dim=300:400"], "keeps none of the candidates [64, 128, 256, 512]"),  # needs the backbone's d
    (["--min-steps", "300", "--max-steps", "100"], "--max-steps 100 is below --min-steps 300"),
])
def test_bad_input_exits_2_naming_the_value_with_nothing_written(args, match, tmp_path) -> None:
    res = invoke(tmp_path, *args)
    assert res.exit_code == 2, res.output
    assert match in res.output, res.output
    assert "Traceback" not in res.output and res.exception is not None and isinstance(res.exception, SystemExit)
    assert not (tmp_path / "s").exists()  # no folder, no study
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_after_a_typo_the_corrected_command_runs_in_the_same_folder(tmp_path) -> None:
    bad = invoke(tmp_path, *TINY_CLI, "--set", "optim.lrr=0.1")
    assert bad.exit_code == 2 and not (tmp_path / "s").exists()
    good = invoke(tmp_path, *TINY_CLI, "--set", "optim.lr=0.1")
    assert good.exit_code == 0, good.output
    summary = json.loads((tmp_path / "s" / "search.json").read_text())
    assert summary["trials"]["done"] == 1 and summary["settings"]["overrides"] == ["optim.lr=0.1"]
    db = (tmp_path / "s" / "study.db").resolve()
    assert f"optuna-dashboard sqlite:///{db}" in good.output  # the hand-off, exactly
    assert summary["dashboard"] == f"optuna-dashboard sqlite:///{db}"


def test_a_study_without_trials_takes_the_settings_of_the_next_run(tmp_path) -> None:
    """A start that failed after the study was made (e.g. killed while preparing) must not block
    a rerun with other settings; a study with trials still refuses them."""
    import optuna

    from geohead.search.storage import open_storage
    from geohead.search.study import create_study

    url = f"sqlite:///{tmp_path / 'study.db'}"
    create_study(SearchConfig(steps=5), open_storage(url))
    study = create_study(SearchConfig(steps=7), open_storage(url))
    assert study.user_attrs["search_config"]["min_steps"] == 7
    study.add_trial(optuna.trial.create_trial(value=0.5))
    with pytest.raises(SearchError, match="made with other settings"):
        create_study(SearchConfig(steps=9), open_storage(url))


def test_a_predictor_study_made_before_the_published_predictor_does_not_resume(tmp_path) -> None:
    """BYOL/SimSiam studies record that their trials use the method's published predictor; one
    made before (no such key, a SiLU predictor then) refuses to mix with new trials."""
    import optuna

    from geohead.search.storage import open_storage
    from geohead.search.study import create_study

    assert SearchConfig(objective="byol").identity()["predictor"] == "published"
    assert "predictor" not in SearchConfig(objective="barlow").identity()
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = create_study(SearchConfig(objective="simsiam"), open_storage(url))
    old = {k: v for k, v in study.user_attrs["search_config"].items() if k != "predictor"}
    study.set_user_attr("search_config", old)
    study.add_trial(optuna.trial.create_trial(value=0.5))
    with pytest.raises(SearchError, match="predictor: stored None vs now 'published'"):
        create_study(SearchConfig(objective="simsiam"), open_storage(url))


def test_the_api_fails_before_writing_too(tmp_path) -> None:
    with pytest.raises(SearchError, match="unknown backbone"):
        run_search(SearchConfig(out=str(tmp_path / "s"), backbone="resnet999"))
    assert not (tmp_path / "s").exists()


def test_storage_checks_connect_to_nothing() -> None:
    from geohead.search.storage import check_storage

    check_storage(None)
    check_storage("sqlite:///study.db")  # the current folder exists
    check_storage("postgresql+psycopg2://me:secret@nowhere.invalid/db")  # driver installed (dev extra); no connection
    with pytest.raises(ValueError, match=r"'mysql://me:\*\*\*@h/db': the database driver 'MySQLdb' is not installed"):
        check_storage("mysql://me:pw@h/db")  # the password never appears in a message
    with pytest.raises(ValueError, match="in-memory database"):
        check_storage("sqlite://")


def test_dashboard_command_per_storage(tmp_path) -> None:
    from geohead.search.storage import dashboard_command

    assert dashboard_command("sqlite:////runs/s/study.db") == "optuna-dashboard sqlite:////runs/s/study.db"
    assert dashboard_command(f"journal:{tmp_path}/j.log") == f"optuna-dashboard {tmp_path}/j.log"
    assert dashboard_command("postgresql://me:pw@host/db") == "optuna-dashboard 'postgresql://me:***@host/db'"


def test_one_progress_bar_over_the_study() -> None:
    import optuna

    from geohead.search.runner import StudyProgress

    study = optuna.create_study(direction="maximize")
    for v in (0.3, 0.7, 0.5):
        study.add_trial(optuna.trial.create_trial(value=v, user_attrs={"head": {"depth": 1}}))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, user_attrs={"duplicate_of": 1}))
    buf = io.StringIO()
    bar = StudyProgress(10, 480.0, file=buf, force=True, tick=0)
    bar.update(study)
    bar.write("trial 3 COMPLETE ...")
    bar.close()
    text = buf.getvalue()
    assert "3/10 heads" in text  # the repeat of a head is not counted
    assert "elapsed 0:00 / 8:00" in text and "best score 0.7000 (trial 1)" in text
    assert "trial 3 COMPLETE ..." in text
    # no terminal, no bar: lines only
    quiet = io.StringIO()
    plain = StudyProgress(10, None, file=quiet)
    plain.update(study)
    plain.write("a line")
    plain.close()
    assert quiet.getvalue() == "a line\n"


@pytest.mark.parametrize("overrides, prototypes", [((), 512), (("head.spec.prototypes=64",), 64)])
def test_dino_prototypes_are_capped_at_4d_unless_set(overrides, prototypes) -> None:
    """DINO's 65536 prototypes would cost ~2 s a step on the CPU default backbone (d = 128): the
    search caps them at 4·d like every other width, and the screen's objective has as many."""
    from geohead.search.inputs import prepare_trial_inputs

    cfg = SearchConfig(objective="dino", n_train=128, batch_size=32, steps=2, probe_train=64, probe_test=32,
                       orbit_images=4, families=("hue",), screen_batch=32, overrides=overrides).validate()
    inputs = prepare_trial_inputs(cfg, lambda s: None)
    assert inputs.in_dim == 128 and inputs.base_spec.prototypes == prototypes
    assert inputs.screen_inputs.objective.out_dim == prototypes


@pytest.mark.parametrize("score, resumes", [("theory", False), ("geometry", True)])
def test_a_study_resumes_only_with_the_weights_its_trials_were_scored_with(tmp_path, score, resumes) -> None:
    """Studies record their score's weights; one made before they did is read with the weights its
    score name had then: ``theory`` included low orbit compression (it refuses to mix with trials
    scored without), ``geometry`` was RankMe alone as now (it resumes)."""
    import optuna

    from geohead.search.score import LABEL_FREE_SCORES, UNRECORDED_WEIGHTS
    from geohead.search.storage import open_storage
    from geohead.search.study import create_study

    url = f"sqlite:///{tmp_path / 'study.db'}"
    cfg = SearchConfig(steps=5, score=score)
    study = create_study(cfg, open_storage(url))
    assert study.user_attrs["search_config"]["score_weights"] == LABEL_FREE_SCORES[score]
    old = {k: v for k, v in cfg.identity().items() if k != "score_weights"}  # as older versions stored it
    study.set_user_attr("search_config", old)
    study.add_trial(optuna.trial.create_trial(value=0.5))
    if resumes:
        assert create_study(cfg, open_storage(url)).study_name == cfg.study_name
    else:
        assert UNRECORDED_WEIGHTS["theory"]["low_compression"] == 1.0
        with pytest.raises(SearchError, match=r"score_weights: stored \{.*'low_compression': 1\.0"):
            create_study(cfg, open_storage(url))
