"""Where a study lives: SQLite under runs/sweeps by default, any RDB URL, or memory.

Several workers may share one study. SQLite serialises writers with a lock: each connection
waits up to :data:`SQLITE_TIMEOUT` seconds for it, and a write that still finds the database
busy is retried (each of Optuna's writes is one transaction, so a retry neither loses nor
repeats one). SQLite files are put in write-ahead-log mode (readers do not block the writer,
and a commit costs about a fifth: Optuna commits every attribute on its own), which needs a
local disk: over several hosts use a server database (``postgresql://...``).
"""

from __future__ import annotations

import hashlib
import inspect
import random
import re
import shlex
import sqlite3
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import optuna

from dse.errors import DseError
from dse.files import why_unwritable

T = TypeVar("T")
#: Seconds a SQLite connection waits for another worker's write.
SQLITE_TIMEOUT = 60.0
#: Attempts of a write that found the database busy or hit a transient error.
ATTEMPTS = 8


def default_url(study_name: str, root: Path) -> str:
    """``sqlite:///<root>/runs/sweeps/<study_name>.db``."""
    return f"sqlite:///{root / 'runs' / 'sweeps' / f'{study_name}.db'}"


def transient(exc: BaseException, also: tuple[type[BaseException], ...] = ()) -> bool:
    """A database error that may pass if tried again (a lock, a dropped connection, or one of
    ``also``)."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (OperationalError, optuna.exceptions.StorageInternalError, *also)):
            return True
        if isinstance(seen, DBAPIError) and seen.connection_invalidated:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry(
    action: Callable[[], T],
    also: tuple[type[BaseException], ...] = (),
    fatal: Callable[[BaseException], bool] | None = None,
) -> T:
    """``action()``, tried again with a random back-off while the database is busy (not when
    ``fatal(exc)`` says the error will not pass)."""
    for attempt in range(ATTEMPTS):
        try:
            return action()
        except Exception as exc:
            done = attempt == ATTEMPTS - 1 or (fatal is not None and fatal(exc))
            if not transient(exc, also) or done:
                raise
            time.sleep(random.uniform(0.05, 0.2) * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _sqlite_pragmas(connection: Any, record: Any) -> None:
    """Write-ahead log, and fsync at checkpoints rather than at every commit (a crash of the
    process loses nothing; a power cut may lose the last commits)."""
    import sqlite3

    cursor = connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError:
        pass  # another worker holds a lock: the file keeps its mode, which is still correct
    finally:
        cursor.close()


#: Tables every Optuna database has: a SQLite file with tables but not these is another
#: application's, and the sweeper does not write into it.
OPTUNA_TABLES = frozenset({"studies", "version_info"})
#: What an application stamps a SQLite file with (0 in a database nobody has claimed).
STAMPS = ("user_version", "application_id")


def check_sqlite(url: str) -> None:
    """Before Optuna opens a SQLite file: its folder is made (one line if it cannot be: under
    a file, in a place that cannot be written), and an existing file must be a regular file
    holding Optuna's tables, or an empty database; another application's database (tables of
    its own, or its own version stamp) or a file that is no database is refused in one line."""
    path = url.split(":///", 1)[-1]
    if not path or path == ":memory:" or path.startswith("file:"):
        return
    p = Path(path).expanduser()
    fix = "give a file of its own, e.g. hydra.sweeper.storage=sqlite:///runs/sweeps/NAME.db"
    why = why_unwritable(p.parent)
    if why is not None:
        raise DseError(f"storage {url}: cannot write there ({why}): {fix}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DseError(f"storage {url}: cannot make {p.parent} ({exc.strerror}): {fix}") from None
    if not p.exists():
        return
    if not p.is_file():
        raise DseError(f"storage {url}: {p} is not a regular file (a device or folder): {fix}")
    if p.stat().st_size == 0:
        return  # a new, empty file: Optuna makes its tables
    try:
        with closing(sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
            tables = {r[0] for r in rows}
            stamps = [db.execute(f"PRAGMA {k}").fetchone()[0] for k in STAMPS]
    except sqlite3.Error as exc:
        raise DseError(f"storage {url}: {p} is not a SQLite database ({exc}): {fix}") from None
    if tables >= OPTUNA_TABLES or (not tables and not any(stamps)):
        return
    held = ", ".join(sorted(tables)[:5]) or f"no tables, its own version stamp {stamps}"
    raise DseError(
        f"storage {url}: {p} is another application's SQLite database ({held}), not an "
        f"Optuna study's: {fix}"
    )


#: RDBStorage's argument for the callback of a trial whose worker stopped beating (renamed in
#: Optuna 4.9).
CALLBACK = (
    "heartbeat_stale_trial_callback"
    if "heartbeat_stale_trial_callback"
    in inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    else "failed_trial_callback"
)
#: Database drivers SQLAlchemy names in a URL (``postgresql+DRIVER://``) and the pip package
#: that provides each (a bare ``postgresql://`` means psycopg: :func:`with_driver`).
DRIVERS = {
    "psycopg2": "psycopg2-binary",
    "psycopg": "psycopg[binary]",
    "pg8000": "pg8000",
    "asyncpg": "asyncpg",
    "mysqldb": "mysqlclient",
    "pymysql": "PyMySQL",
    "mysqlconnector": "mysql-connector-python",
    "oracledb": "oracledb",
    "pyodbc": "pyodbc",
}


@dataclass(frozen=True)
class Options:
    """How a server database is reached, and how dead workers are noticed."""

    password_file: str | None = None  # a file holding the password (else libpq's own ways)
    connect_timeout: int = 10  # seconds to wait for a server to answer
    heartbeat_interval: int | None = 60  # seconds between a running trial's heartbeats
    grace_period: int | None = None  # a heartbeat this old fails its trial (None: 2 intervals)
    retry_failed: int = 0  # times a dead worker's trial is run again


def masked(url: str) -> str:
    """``url`` as it may be shown: its password, if any, as ``***``."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads (a bad port): refused later
        return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


def read_password(path: str, url: str) -> str:
    """The password in the file ``path`` (its first line)."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise DseError(
            f"hydra.sweeper.password_file={path}: cannot read it ({exc.strerror}): give a "
            "readable file holding the password of " + masked(url)
        ) from None
    password = text.splitlines()[0] if text.strip() else ""
    if not password:
        raise DseError(f"hydra.sweeper.password_file={path} is empty: write the password in it")
    return password


def server_args(url: str, options: Options) -> dict[str, Any]:
    """The driver's connection arguments of a server URL: the timeout and the password read
    from ``options.password_file``. A password written in the URL is refused: Hydra saves
    the command line and the config in every run's ``.hydra/``, and a process's command line
    is public on its host."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.password is not None:
        raise DseError(
            f"hydra.sweeper.storage={masked(url)} holds a password, which would be saved in "
            "every run's .hydra/ and shown in process lists: remove it from the URL and give "
            "it in PGPASSWORD, ~/.pgpass or hydra.sweeper.password_file"
        )
    args: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        args["connect_timeout"] = int(options.connect_timeout)
    if options.password_file:
        args["password"] = read_password(options.password_file, url)
    return args


def with_driver(url: str) -> str:
    """``url`` with its driver named: a bare ``postgresql://`` is reached with psycopg (3),
    whichever SQLAlchemy picks by default (its versions differ)."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql+psycopg://{rest}" if sep and scheme == "postgresql" else url


def dashboard_install(url: str) -> str:
    """The pip command that installs optuna-dashboard with the driver ``url`` needs."""
    package = driver_package(url) if "://" in url and not url.startswith("sqlite") else ""
    return f"pip install optuna-dashboard{f' {shlex.quote(package)}' if package else ''}"


def driver_package(url: str) -> str:
    """The pip package of the driver a URL names."""
    scheme = with_driver(url).split("://", 1)[0]
    backend, _, driver = scheme.partition("+")
    driver = driver or {"mysql": "mysqldb"}.get(backend, backend)
    return DRIVERS.get(driver, driver)


def refusal(exc: BaseException, url: str, timeout: int) -> str:
    """One line for a server that could not be used: why, and what to do."""
    from sqlalchemy.engine import make_url

    text = " ".join(str(getattr(exc, "orig", None) or exc).split())
    shown = masked(url)
    try:
        parsed = make_url(url)
        where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
        user, database = parsed.username, parsed.database
    except Exception:  # noqa: BLE001 - an unreadable URL: the first line of the error
        return f"cannot open the storage {shown}: {text[:300]}"
    if "timeout expired" in text or "timed out" in text:
        return (
            f"storage {shown}: the server at {where} did not answer within {timeout} s: check "
            "the host, the port and the firewall (hydra.sweeper.connect_timeout waits longer)"
        )
    if "Connection refused" in text or "No such file or directory" in text:
        return (
            f"storage {shown}: no server listens at {where} (connection refused): start it, or "
            "give its host and port"
        )
    if "password authentication failed" in text or "no password supplied" in text:
        return (
            f"storage {shown}: the server refused user '{user}' (wrong or missing password): "
            "give the password in PGPASSWORD, ~/.pgpass or hydra.sweeper.password_file"
        )
    if "does not exist" in text and "database" in text:
        return (
            f"storage {shown}: the server at {where} has no database '{database}': create it "
            f"(createdb -O {user} {database}) or name another"
        )
    if "no pg_hba.conf entry" in text:
        return (
            f"storage {shown}: the server at {where} takes no logins of user '{user}' from this "
            "host (pg_hba.conf): ask its administrator to allow it"
        )
    return f"cannot open the storage {shown}: {text[:300]}"


def open_storage(url: str, options: Options | None = None) -> Any:
    """The Optuna storage for ``url`` (None for 'memory'); a SQLite file checked
    (:func:`check_sqlite`) and its directory made; a server's password from libpq's
    ``PGPASSWORD`` or ``~/.pgpass`` or ``options.password_file``, never from the URL. With a
    heartbeat interval, a trial whose worker stopped beating is failed (and retried
    ``options.retry_failed`` times) by the next worker that asks for a trial."""
    if url == "memory":
        return None
    options = options or Options()
    from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError

    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        check_sqlite(url)
        kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT}}
    else:
        try:
            kwargs = {"connect_args": server_args(url, options)}
        except (ArgumentError, ValueError):
            raise DseError(
                f"hydra.sweeper.storage={masked(url)} is not a database URL: give one like "
                "postgresql://USER@HOST:PORT/DATABASE"
            ) from None
    heartbeat: dict[str, Any] = {}
    if options.heartbeat_interval:
        heartbeat = {
            "heartbeat_interval": int(options.heartbeat_interval),
            "grace_period": options.grace_period,
            CALLBACK: optuna.storages.RetryFailedTrialCallback(max_retry=int(options.retry_failed))
            if options.retry_failed
            else None,
        }
    try:
        # two workers creating the tables at once: the slower one finds them made and retries
        with warnings.catch_warnings():  # heartbeats are experimental: chosen, not a surprise
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = retry(
                lambda: optuna.storages.RDBStorage(
                    with_driver(url), engine_kwargs=kwargs, **heartbeat
                ),
                also=(IntegrityError,),
                fatal=_unreachable,
            )
    except (ImportError, NoSuchModuleError):
        raise DseError(
            f"storage {masked(url)}: its database driver is not installed: pip install "
            f"{driver_package(url)}"
        ) from None
    except DseError:
        raise
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy and driver errors are many classes
        raise DseError(refusal(exc, url, options.connect_timeout)) from None
    if url.startswith("sqlite:") and hasattr(storage, "engine"):
        from sqlalchemy import event

        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()  # connections from now on get the pragmas
    return storage


def _unreachable(exc: BaseException) -> bool:
    """A server that refused or did not answer: no use trying again at once."""
    text = str(exc)
    return any(
        m in text
        for m in (
            "timeout expired",
            "Connection refused",
            "password authentication failed",
            "no password supplied",
            "does not exist",
            "no pg_hba.conf entry",
        )
    )


#: Seconds a worker waits for another to finish asking for its trials (``one_at_a_time``):
#: a worker stopped (not dead) while asking would otherwise hold every other one.
LOCK_WAIT = 30.0


@contextmanager
def one_at_a_time(storage: Any, name: str, wait_s: float = LOCK_WAIT) -> Iterator[None]:
    """A block that one worker of the study ``name`` runs at a time: on a PostgreSQL server, a
    session advisory lock (released by the server if the worker dies; after ``wait_s`` seconds
    of waiting the block runs without it, saying so); elsewhere none. Without the lock, two
    workers may each start one more trial than ``total_trials`` leaves."""
    engine = getattr(storage, "engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        yield
        return
    from sqlalchemy import text

    key = int.from_bytes(
        hashlib.sha1(f"dse-study:{name}".encode()).digest()[:8], "big", signed=True
    )
    with engine.connect() as conn:
        deadline = time.monotonic() + wait_s
        held = False
        while not held:
            held = bool(
                retry(
                    lambda: conn.execute(
                        text("SELECT pg_try_advisory_lock(:k)"), {"k": key}
                    ).scalar()
                )
            )
            conn.commit()
            if held:
                break
            if time.monotonic() > deadline:
                print(
                    f"another worker of study '{name}' has been asking for trials for "
                    f"{wait_s:g} s (stopped?): asking without waiting for it",
                    file=sys.stderr,
                )
                break
            time.sleep(random.uniform(0.02, 0.1))
        try:
            yield
        finally:
            if held:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
