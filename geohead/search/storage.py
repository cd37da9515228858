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
tell a dead worker's trial from a running one: it stays RUNNING and is not retried. A RUNNING
trial of an RDB study that never sent a heartbeat (:func:`silent_running`) is not waited for.
"""
from __future__ import annotations

import warnings
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


#: SQLAlchemy dialects Optuna's RDB storage is known to work with.
RDB_SCHEMES = ("sqlite", "postgresql", "mysql", "mariadb")
_STORAGE_FORMS = ("sqlite:///path/study.db, postgresql://user@host/db, mysql://user@host/db, "
                  f"or a journal file (journal:PATH or a path ending in {' or '.join(JOURNAL_SUFFIXES)})")


def check_storage(storage: str | None) -> None:
    """Raise ``ValueError`` naming the value and the fix when ``--storage`` cannot be opened:
    an unknown scheme, a malformed URL, a missing database driver, or the folder of an SQLite or
    journal file that does not exist. Connects to nothing and writes nothing (a server that
    cannot be reached is found when the storage is opened)."""
    if storage is None or storage == "":
        return
    if is_journal(storage):
        path = Path(storage[len("journal:"):] if storage.startswith("journal:") else storage).expanduser()
        _check_parent(storage, path)
        if not str(path) or not path.parent.is_dir():
            raise ValueError(f"--storage {storage!r}: folder {str(path.parent)!r} does not exist; create it first "
                             "or give a journal file in an existing folder")
        return
    if "://" not in storage:
        raise ValueError(f"--storage {storage!r} is neither a database URL nor a journal file; use {_STORAGE_FORMS}")
    scheme = storage.split("://", 1)[0]
    base = scheme.split("+", 1)[0].lower()
    if base not in RDB_SCHEMES:
        fix = " (SQLAlchemy spells it postgresql://)" if base in ("postgres", "psql", "pg") else ""
        raise ValueError(f"--storage {describe(storage)!r}: unknown storage scheme {scheme!r}{fix}; use {_STORAGE_FORMS}")
    from sqlalchemy.engine import make_url

    url = _driver(storage)
    try:
        parsed = make_url(url)
        dialect = parsed.get_dialect()
    except Exception as exc:  # noqa: BLE001 - sqlalchemy's ArgumentError / NoSuchModuleError
        raise ValueError(f"--storage {describe(storage)!r} is not a valid URL ({str(exc).splitlines()[0]}); "
                         f"use {_STORAGE_FORMS}") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        pkg = {"postgresql": "psycopg2-binary", "mysql": "pymysql (and write mysql+pymysql://)",
               "mariadb": "pymysql (and write mariadb+pymysql://)"}.get(base, getattr(exc, "name", None) or "its driver")
        raise ValueError(f"--storage {describe(storage)!r}: the database driver {getattr(exc, 'name', '')!r} is not "
                         f"installed; pip install {pkg}") from None
    if base == "sqlite":
        db = parsed.database
        if not db or db == ":memory:":
            raise ValueError(f"--storage {storage!r} is an in-memory database that no rerun or worker can see; "
                             "give a file: sqlite:///path/study.db")
        _check_parent(storage, Path(db).expanduser())
        folder = Path(db).expanduser().resolve().parent
        if not folder.is_dir():
            raise ValueError(f"--storage {storage!r}: folder {str(folder)!r} does not exist; create it first "
                             "or give a file in an existing folder")


def _check_parent(storage: str, path: Path) -> None:
    """A storage file whose path runs through a file, or that is a folder, is a ``ValueError``."""
    if path.is_dir():
        raise ValueError(f"--storage {storage!r}: {str(path)!r} is a folder; give a file path in it (e.g. {str(path / 'study.db')!r})")
    for parent in path.absolute().parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"--storage {storage!r}: {str(parent)!r} is a file, so {str(path)!r} cannot be made; "
                             "give a path in an existing folder")


def dashboard_command(url: str) -> str:
    """The shell command that browses the study of ``url`` with optuna-dashboard (the password of
    a database URL elided: type it in)."""
    import shlex

    if is_journal(url):
        path = url[len("journal:"):] if url.startswith("journal:") else url
        return f"optuna-dashboard {shlex.quote(str(Path(path).expanduser().resolve()))}"
    return f"optuna-dashboard {shlex.quote(describe(url))}"


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
        try:  # the journal is replayed here
            return JournalStorage(JournalFileBackend(str(path)))
        except (KeyError, TypeError, AttributeError, IndexError) as exc:  # lines of JSON that Optuna did not write
            raise ValueError(f"journal storage {str(path)!r} cannot be read ({type(exc).__name__}: {str(exc)[:60]}); it "
                             "was not written by Optuna: give a fresh --out or --storage") from None
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
    url = _driver(url)
    engine: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine = {"connect_args": {"timeout": 120}}  # several local workers wait for the write lock
    else:
        engine = {"pool_pre_ping": True}
    try:
        with warnings.catch_warnings():  # heartbeats and their retry callback are "experimental" in Optuna
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            kwargs: dict[str, Any] = {}
            if heartbeat:
                kwargs = {"heartbeat_interval": int(heartbeat), "grace_period": 3 * int(heartbeat),
                          retry_kw: Retry(max_retry=MAX_RETRY)}
            return _rdb_storage(url, engine, kwargs)
    except ImportError:
        raise ValueError(f"storage {describe(url)!r}: the database driver is not installed; pip install it "
                         "(PostgreSQL: pip install psycopg2-binary)") from None
    except Exception as exc:  # sqlalchemy's ArgumentError/OperationalError: bad URL or unreachable server
        raise ValueError(f"cannot open storage {describe(url)!r}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def _rdb_storage(url: str, engine: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """``optuna.storages.RDBStorage``; on SQLite, retried while another process creates the same
    new database's tables (both see no tables, one fails with IntegrityError on alembic_version
    or "table ... already exists"): the second attempt finds them made."""
    import random
    import time

    import optuna

    for attempt in range(10):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine, **kwargs)
        except Exception as exc:  # noqa: BLE001 - sqlalchemy's IntegrityError / OperationalError
            names = {c.__name__ for c in type(exc).__mro__}
            racing = names & {"IntegrityError", "OperationalError"} and "already exists" in str(exc) or "IntegrityError" in names
            if not (url.startswith("sqlite") and racing) or attempt == 9:
                raise
            time.sleep(0.2 + 0.3 * random.random() * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


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
    """Numbers of trials that were re-enqueued by the retry callback, or stopped by a Ctrl-C
    (:data:`INTERRUPTED_ATTR`; :func:`requeue_interrupted` enqueues them again): their retries replace them."""
    out: set[int] = set()
    for t in trials:
        out.update(int(n) for n in t.system_attrs.get("retry_history", []))
        if t.user_attrs.get(INTERRUPTED_ATTR):
            out.add(t.number)
    return out


#: The user attribute of a trial a Ctrl-C stopped: not measured, not counted, retried on the next run.
INTERRUPTED_ATTR = "interrupted"
#: User attributes a retry keeps from the trial it repeats (the published-head marker).
_KEPT_ATTRS = ("reference",)


def requeue_interrupted(study: Any) -> list[int]:
    """Enqueue again, with the same parameters, every trial a Ctrl-C stopped that has no retry
    yet (the retry records ``retry_of``); returns their numbers."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = {int(t.user_attrs["retry_of"]) for t in trials if "retry_of" in t.user_attrs}
    todo = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get(INTERRUPTED_ATTR)
            and t.number not in retried]
    for t in todo:
        kept = {k: v for k, v in t.user_attrs.items() if k in _KEPT_ATTRS}
        study.enqueue_trial(t.params, user_attrs={**kept, "retry_of": t.number})
    return [t.number for t in todo]


def count_trials(study: Any, watched: bool = False) -> dict[str, int]:
    """``done`` (distinct heads measured: complete, pruned, and failed without a retry),
    ``running``, ``waiting`` (enqueued trials), ``complete``, ``pruned``, ``failed`` (every FAIL,
    retried ones included), ``duplicates`` (trials that drew a head already measured: not
    trained, not counted in the others). ``watched``: ``running`` leaves out the trials
    :func:`silent_running` names, which no worker can wait for."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    silent = silent_running(study, trials) if watched else set()
    counts = {"done": 0, "running": 0, "waiting": 0, "complete": 0, "pruned": 0, "failed": 0, "duplicates": 0}
    for t in trials:
        if "duplicate_of" in t.user_attrs and t.state != TrialState.RUNNING:
            counts["duplicates"] += 1
        elif t.state == TrialState.COMPLETE:
            counts["complete"] += 1
            counts["done"] += 1
        elif t.state == TrialState.PRUNED:
            counts["pruned"] += 1
            counts["done"] += 1
        elif t.state == TrialState.FAIL:
            counts["failed"] += 1
            counts["done"] += t.number not in retried
        elif t.state == TrialState.RUNNING:
            counts["running"] += t.number not in silent
        elif t.state == TrialState.WAITING:
            counts["waiting"] += 1
    return counts


def silent_running(study: Any, trials: list[Any] | None = None) -> set[int]:
    """Numbers of RUNNING trials that started more than the grace period ago and never sent a
    heartbeat (a worker without heartbeats, another program, a crafted ``study.db``). Optuna's
    stale check fails only trials whose last heartbeat is old, so these would stay RUNNING
    while a worker waited for them; the search counts them as neither running nor done. Empty
    for storages without heartbeats. ``trials``: the study's trials when the caller has them."""
    from datetime import datetime, timedelta

    from optuna.trial import TrialState

    storage = study._storage
    if not has_heartbeat(storage):
        return set()
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    rdb = getattr(storage, "_backend", storage)  # Optuna wraps an RDBStorage in a cache
    with _create_scoped_session(rdb.scoped_session) as session:
        rows = session.query(models.TrialModel.number).filter(
            models.TrialModel.study_id == study._study_id, models.TrialModel.state == TrialState.RUNNING,
            ~models.TrialModel.heartbeats.any()).all()
    unheard = {int(n) for (n,) in rows}
    cutoff = datetime.now() - timedelta(seconds=rdb.grace_period or 2 * rdb.heartbeat_interval)
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    return {t.number for t in trials if t.number in unheard and t.datetime_start is not None and t.datetime_start < cutoff}


def fail_stale(study: Any) -> None:
    """Mark trials of dead workers FAIL now (and enqueue their retries); a no-op without heartbeats."""
    from optuna.storages import fail_stale_trials

    if has_heartbeat(study._storage):
        fail_stale_trials(study)


__all__ = ["MAX_RETRY", "RDB_SCHEMES", "check_storage", "count_trials", "dashboard_command", "describe", "fail_stale", "has_heartbeat", "is_journal", "open_storage",
           "INTERRUPTED_ATTR", "requeue_interrupted", "retried_numbers", "silent_running", "storage_url"]
