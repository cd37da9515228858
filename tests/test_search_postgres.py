"""Two worker processes against a real PostgreSQL server complete one shared study.

The server comes from ``.ci/postgres.sh`` (Debian's postgresql on 127.0.0.1), which prints the
URL to export as ``GEOHEAD_TEST_POSTGRES_URL``; without that variable the test starts nothing
and skips.
"""
from __future__ import annotations

import json
import os
import uuid

import pytest

from geohead.search import SearchConfig, run_search
from geohead.search.outputs import read_trials_csv
from geohead.search.storage import open_storage

URL = os.environ.get("GEOHEAD_TEST_POSTGRES_URL")
#: the tiny search's whitened heads (here: the verdict's re-training) whiten from few samples
pytestmark = pytest.mark.usefixtures("tiny_whitening")
TINY = dict(n_train=256, batch_size=64, steps=2, probe_train=128, probe_test=64, orbit_images=8, families=("hue",),
            screen_batch=64, timeout=None, progress=False, heartbeat=2)


@pytest.mark.skipif(not URL, reason="GEOHEAD_TEST_POSTGRES_URL is not set; run `eval \"$(.ci/postgres.sh)\"` "
                                    "(installs and starts a local PostgreSQL) to run this test")
def test_two_workers_share_one_postgres_study(tmp_path) -> None:
    import optuna

    name = f"geohead-test-{uuid.uuid4().hex[:12]}"
    storage = open_storage(URL, heartbeat=None)  # postgresql:// with the installed driver (psycopg2)
    try:
        res = run_search(SearchConfig(out=str(tmp_path / "s"), storage=URL, study=name, workers=2, trials=4, **TINY))
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.trials
        assert len(trials) == 4 and all(t.state.name in ("COMPLETE", "PRUNED") for t in trials), \
            [(t.number, t.state.name, t.user_attrs.get("fail_reason")) for t in trials]
        workers = {t.user_attrs["worker"] for t in trials}
        assert len(workers) == 2, workers  # both processes ran trials of the one study
        assert os.getpid() not in {int(w.rsplit(":", 1)[1]) for w in workers}  # they were separate processes
        rows = read_trials_csv(tmp_path / "s" / "trials.csv")
        assert [r["number"] for r in rows] == [0, 1, 2, 3]
        summary = json.loads((tmp_path / "s" / "search.json").read_text())
        assert summary["storage"].startswith("postgresql://") and ":***@" in summary["storage"]
        assert res.study_name == name and (tmp_path / "s" / "best_head.json").is_file()
    finally:
        try:
            optuna.delete_study(study_name=name, storage=storage)
        except KeyError:
            pass
