"""Where a study lives, heartbeats, retry of trials whose worker died, and trial bookkeeping.

``--storage`` accepts

* nothing: ``sqlite:///OUT/study.db`` in the output folder (one machine, one or a few processes);
* an SQLAlchemy URL: ``sqlite:///path.db``, ``postgresql://user:pass@host/db`` (many machines;
  needs ``psycopg2``), ``mysql://...``;
* a journal file: ``journal:PATH`` or a path ending in ``.log``/``.journal`` (Optuna's
  :class:`~optuna.storages.JournalStorage` with a file backend: several processes on one host,
  no database server).

RDB storages (SQLite, PostgreSQL, MySQL) get heartbeats: every worker's running trial writes a
heartbeat every ``heartbeat`` seconds; a trial whose heartbeat is older than the grace period
(3 heartbeats) belonged to a worker that died (SIGKILL, preemption, power loss). The next worker
to start a trial marks it FAIL and Optuna's ``RetryHeartbeatStaleTrialCallback`` (formerly
``RetryFailedTrialCallback``) re-enqueues its parameters as a new trial, up to
:data:`MAX_RETRY` times. Optuna's journal storage has no heartbeats, so a journal study cannot
tell a dead worker's trial from a running one: it stays RUNNING and is not retried.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

MAX_RETRY = 2
JOURNAL_SUFFIXES = (".log", ".journal")


def storage_url(storage: str | None, out_dir: Path) -> str:
    """The storage string for ``--storage`` (default: SQLite in ``out_dir``)."""
    if storage is None or storage == "":
        return f"sqlite:///{(Path(out_dir) / 'study.db').resolve()}"
    return storage


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or (("://" not in url) and url.endswith(JOURNAL_SUFFIXES))


def describe(url: str) -> str:
    """The URL without a password (for logs and search.json)."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        user = cred.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in cred else url
    return url


def open_storage(url: str, heartbeat: int | None = 20) -> Any:
    """An Optuna storage for ``url`` (see the module docstring); heartbeats for RDB URLs.

    Raises ``ValueError`` with the fix for URLs Optuna cannot open (unknown scheme, missing
    driver such as psycopg2, a journal folder that does not exist).
    """
    import optuna

    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(url[len("journal:"):] if url.startswith("journal:") else url).expanduser()
        if not path.parent.is_dir():
            raise ValueError(f"journal storage {str(path)!r}: folder {str(path.parent)!r} does not exist; create it first")
        return JournalStorage(JournalFileBackend(str(path)))
    if "://" not in url:
        raise ValueError(
            f"storage {url!r} is neither a database URL (sqlite:///file.db, postgresql://user@host/db) "
            f"nor a journal file (journal:PATH or a path ending in {' or '.join(JOURNAL_SUFFIXES)})"
        )
    try:
        from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry
        retry_kw = "heartbeat_stale_trial_callback"
    except ImportError:  # optuna < 4.9
        from optuna.storages import RetryFailedTrialCallback as Retry  # type: ignore[no-redef]
        retry_kw = "failed_trial_callback"
    kwargs: dict[str, Any] = {}
    if heartbeat:
        kwargs = {"heartbeat_interval": int(heartbeat), "grace_period": 3 * int(heartbeat),
                  retry_kw: Retry(max_retry=MAX_RETRY)}
    url = _driver(url)
    engine: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine = {"connect_args": {"timeout": 120}}  # several local workers wait for the write lock
    else:
        engine = {"pool_pre_ping": True}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine, **kwargs)
    except ImportError:
        raise ValueError(f"storage {describe(url)!r}: the database driver is not installed; pip install it "
                         "(PostgreSQL: pip install psycopg2-binary)") from None
    except Exception as exc:  # sqlalchemy's ArgumentError/OperationalError: bad URL or unreachable server
        raise ValueError(f"cannot open storage {describe(url)!r}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def _driver(url: str) -> str:
    """``postgresql://`` with the installed driver: SQLAlchemy 2.1 defaults to psycopg 3, while
    geohead's ``dev`` extra installs psycopg2; name psycopg2 when only it is importable."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def has_heartbeat(storage: Any) -> bool:
    from optuna.storages._heartbeat import is_heartbeat_enabled

    return is_heartbeat_enabled(storage)


def retried_numbers(trials: list[Any]) -> set[int]:
    """Numbers of trials that were re-enqueued by the retry callback (their retries replace them)."""
    out: set[int] = set()
    for t in trials:
        out.update(int(n) for n in t.system_attrs.get("retry_history", []))
    return out


def count_trials(study: Any) -> dict[str, int]:
    """``done`` (complete, pruned, and failed without a retry), ``running``, ``waiting`` (enqueued
    retries), ``complete``, ``pruned``, ``failed`` (every FAIL, retried ones included)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    counts = {"done": 0, "running": 0, "waiting": 0, "complete": 0, "pruned": 0, "failed": 0}
    for t in trials:
        if t.state == TrialState.COMPLETE:
            counts["complete"] += 1
            counts["done"] += 1
        elif t.state == TrialState.PRUNED:
            counts["pruned"] += 1
            counts["done"] += 1
        elif t.state == TrialState.FAIL:
            counts["failed"] += 1
            counts["done"] += t.number not in retried
        elif t.state == TrialState.RUNNING:
            counts["running"] += 1
        elif t.state == TrialState.WAITING:
            counts["waiting"] += 1
    return counts


def fail_stale(study: Any) -> None:
    """Mark trials of dead workers FAIL now (and enqueue their retries); a no-op without heartbeats."""
    from optuna.storages import fail_stale_trials

    if has_heartbeat(study._storage):
        fail_stale_trials(study)


__all__ = ["MAX_RETRY", "count_trials", "describe", "fail_stale", "has_heartbeat", "is_journal", "open_storage",
           "retried_numbers", "storage_url"]
