"""benchmarks/run_criteria.py: a trained run measured as the search's verdict runs are."""
from __future__ import annotations

import json

import pytest
from conftest import benchmark_module, tiny_cifar_files

from geohead.search import SearchConfig, run_search

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_whitening")
TINY = dict(n_train=256, batch_size=64, probe_train=128, probe_test=64, orbit_images=8, families=("hue",),
            screen_batch=64, timeout=None, progress=False, heartbeat=2)


def test_a_verdict_runs_checkpoint_measures_as_the_verdict_recorded_it(tmp_path) -> None:
    search = tmp_path / "s"
    run_search(SearchConfig(out=str(search), trials=3, steps=2, confirm_seeds=1, keep_checkpoints=True, **TINY))
    confirm = search / "confirm"
    assert (confirm / "pick_s1" / "last.safetensors").is_file()          # this seed's pick beats the published head
    bench = benchmark_module("run_criteria")
    results = tmp_path / "r.json"
    assert bench.main(["--search", str(search), "--run", f"pick={confirm / 'pick_s1' / 'last.safetensors'}",
                       "--run", f"published={confirm / 'published_s1' / 'last.safetensors'}",
                       "--results", str(results)]) == 0
    rec = json.loads(results.read_text())
    for label in ("pick", "published"):
        stored = json.loads((confirm / f"{label}_s1" / "result.json").read_text())
        for key in ("score", "knn_backbone", "rankme_backbone", "heff_spread", "fisher_effective_rank"):
            assert rec["measured"][label][key] == pytest.approx(stored[key], rel=1e-5, abs=1e-6), (label, key)
    assert rec["margin"]["score"] == pytest.approx(rec["measured"]["pick"]["score"] - rec["measured"]["published"]["score"])
    assert set(rec["margin"]) == set(bench.KEYS)
    with pytest.raises(SystemExit):
        bench.main(["--search", str(search), "--run", "pick=x"])


def test_a_lost_search_json_is_rebuilt_with_the_settings_its_search_recorded(tmp_path) -> None:
    bench = benchmark_module("run_criteria")
    st = bench.st
    data = st.cifar_files(tiny_cifar_files(tmp_path, 256, 64))
    ran = st.run_the_search("barlow", tmp_path / "ran", data, 2, st.SCALES["smoke"], None, None, trials=1, score="theory")
    recorded = json.loads((ran / "search.json").read_text())["settings"]
    lost = tmp_path / "lost" / "barlow" / "search"
    argv = ["--search", str(lost), "--rebuild", "barlow", "--seed", "2", "--scale", "smoke", "--data-dir", str(tmp_path)]
    assert bench.main(argv) == 0
    assert json.loads((lost / "search.json").read_text())["settings"] == recorded
    with pytest.raises(FileExistsError):
        bench.main(argv)                                    # a search.json is never replaced
    other = argv.copy()
    other[1] = str(tmp_path / "lost" / "simclr")
    with pytest.raises(ValueError, match="<out>/barlow/search"):
        bench.main(other)
    assert not (tmp_path / "lost" / "simclr").exists()
