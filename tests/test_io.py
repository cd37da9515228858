"""geohead.io: atomic writes (old file kept on failure, no temp files left), safetensors round trips."""
from __future__ import annotations

import json
import os

import pytest
import torch

from geohead.io import (
    SafetensorsReadError,
    atomic_write_bytes,
    atomic_write_text,
    default_mode,
    read_safetensors,
    save_safetensors,
)


def test_atomic_text_and_bytes(tmp_path) -> None:
    path = atomic_write_text(tmp_path / "sub" / "a.json", "{\n}\r\n")
    assert path == tmp_path / "sub" / "a.json"
    assert path.read_bytes() == b"{\n}\r\n"  # written as given, no newline translation
    assert atomic_write_bytes(path, b"\x00\x01") == path and path.read_bytes() == b"\x00\x01"
    assert os.stat(path).st_mode & 0o777 == default_mode()
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"]


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch) -> None:
    path = atomic_write_text(tmp_path / "a.txt", "old")
    import safetensors.torch

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        save_safetensors(path, {"x": torch.ones(2)}, {})
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_safetensors_round_trip_and_shared_storage(tmp_path) -> None:
    base = torch.arange(12.0)
    tensors = {"w": base.view(3, 4), "tied": base.view(3, 4), "t": base.view(3, 4).T, "i": torch.tensor([7])}
    path = save_safetensors(tmp_path / "f.safetensors", tensors, {"format": "pt", "k": "v"})
    assert os.stat(path).st_mode & 0o777 == default_mode()
    loaded, meta = read_safetensors(path, "test file")
    assert meta == {"format": "pt", "k": "v"}
    assert set(loaded) == set(tensors) and all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    only_meta, meta2 = read_safetensors(path, "test file", tensors=False)
    assert only_meta == {} and meta2 == meta


def test_read_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(SafetensorsReadError, match="weights file .*missing.* does not exist"):
        read_safetensors(tmp_path / "missing", "weights file")
    good = save_safetensors(tmp_path / "g", {"x": torch.arange(1000.0)}, {})
    (tmp_path / "cut").write_bytes(good.read_bytes()[:2000])
    (tmp_path / "junk").write_bytes(b"\x80\x04\x95 a pickle")
    for name in ("cut", "junk"):
        with pytest.raises(SafetensorsReadError, match=r"head file .* is not a readable safetensors file \(truncated or corrupted\?\)"):
            read_safetensors(tmp_path / name, "head file")
    assert issubclass(SafetensorsReadError, ValueError)


def test_leaf_module() -> None:
    import ast

    import geohead.io

    tree = ast.parse(open(geohead.io.__file__).read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not [m for m in imported if m.split(".")[0] == "geohead"]


def test_outermost_new_is_the_first_folder_a_mkdir_would_make(tmp_path) -> None:
    from geohead.io import outermost_new

    (tmp_path / "a").mkdir()
    assert outermost_new(tmp_path / "a") is None
    assert outermost_new(tmp_path / "a" / "b" / "c") == tmp_path / "a" / "b"
    assert outermost_new(tmp_path / "n") == tmp_path / "n"


def test_json_lines_stream_records_and_skip_overlong_or_deep_lines(tmp_path) -> None:
    """A metrics file with a 2 MiB line and a line nested 10^5 deep between records: the records
    come back in order, the overlong line unread and the deep one as None (not a RecursionError)."""
    from geohead.io import json_lines

    path = tmp_path / "metrics.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text('{"step": 1}\n' + '{"x": "' + "a" * (2 << 20) + '"}\n' + deep + "\n\n" + '{"step": 2}')
    assert [(line, value) for line, value in json_lines(path, "metrics file", "")] == [
        ('{"step": 1}', {"step": 1}), (deep, None), ('{"step": 2}', {"step": 2})]
    shallow = "[" * 64 + "]" * 64  # parses; one level more is refused as every JSON geohead reads is
    path.write_text(f"{shallow}\n[{shallow}]\n")
    assert [value for _, value in json_lines(path, "metrics file", "")] == [json.loads(shallow), None]



def test_a_report_thins_a_long_log_evenly(tmp_path, monkeypatch) -> None:
    """More loss records than a report plots: every 2^k-th is kept, the first included, at most the bound."""
    from geohead.report import curves

    monkeypatch.setattr(curves, "MAX_PLOTTED", 100)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 1.0}) + "\n" for i in range(1000)))
    losses, monitors = curves.read_metrics(tmp_path)
    assert [r["step"] for r in losses] == list(range(0, 1000, 16)) and monitors == []  # 63 records, stride 16
    thin = curves.Thinned(4)
    for i in range(9):
        thin.add({"step": i})
    assert [r["step"] for r in thin.kept] == [0, 4, 8]


def test_the_metrics_csv_is_rewritten_from_a_stream(tmp_path) -> None:
    """A resumed run rewrites metrics.csv from metrics.jsonl: the same rows as the records, the
    header their keys in order of first appearance, without holding the records (a generator)."""
    import csv

    from geohead.logs import CsvLog
    from geohead.training.tracker import records

    path = tmp_path / "metrics.jsonl"
    recs = [{"step": 1, "loss": 2.5}, {"step": 2, "kind": "monitor", "rankme_head": 3.0}, {"step": 3, "loss": 1.5}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + "torn {\n")
    log = CsvLog(tmp_path / "metrics.csv", grow=True)
    calls = []
    log.rewrite(lambda: calls.append(1) or records(path))
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv", newline="")))
    assert list(rows[0]) == ["step", "loss", "kind", "rankme_head"] and len(calls) == 2
    assert [{k: v for k, v in r.items() if v != ""} for r in rows] == [{k: str(v) for k, v in r.items()} for r in recs]
    log.write({"step": 4, "loss": 1.0, "lr": 0.1})  # a new key widens the file's header, rows kept
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv", newline="")))
    assert list(rows[0]) == ["step", "loss", "kind", "rankme_head", "lr"] and [r["step"] for r in rows] == ["1", "2", "3", "4"]
    assert rows[-1]["lr"] == "0.1" and rows[0]["lr"] == ""


def test_a_growing_csv_log_takes_at_most_its_column_bound(tmp_path) -> None:
    """Records with ever-new keys (200 of 500 keys each) grew the header and every row with them:
    rows x keys cells. The log keeps the first MAX_FIELDS keys, in the file and in a rewrite."""
    import csv

    from geohead.logs import CsvLog

    log = CsvLog(tmp_path / "m.csv", grow=True)
    recs = [{"step": i, **{f"k{i}_{j}": j for j in range(500)}} for i in range(4)]
    for r in recs:
        log.write(r)
    rows = list(csv.reader(open(tmp_path / "m.csv", newline="")))
    assert len(rows[0]) == CsvLog.MAX_FIELDS == 512 and [r[0] for r in rows[1:]] == ["0", "1", "2", "3"]
    assert rows[0][:3] == ["step", "k0_0", "k0_1"] and rows[0][-1] == "k1_10"
    log.rewrite(lambda: iter(recs))
    assert len(next(csv.reader(open(tmp_path / "m.csv", newline="")))) == 512


def test_a_trials_table_of_a_study_with_junk_keys_is_written_within_what_is_read(tmp_path) -> None:
    from geohead.search.results import MAX_COLUMNS, read_trials_csv, write_trials_csv

    rows = [{"number": i, "state": "COMPLETE", "value": 0.5, **{f"junk{j}": j for j in range(1000)}} for i in range(3)]
    write_trials_csv(rows, tmp_path / "trials.csv")
    back = read_trials_csv(tmp_path / "trials.csv")
    assert len(back) == 3 and len(back[0]) == MAX_COLUMNS and back[2]["number"] == 2 and back[0]["value"] == 0.5
