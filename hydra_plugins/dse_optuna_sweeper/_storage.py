"""Where a study lives: SQLite under runs/sweeps by default, any RDB URL, or memory.

Several workers may share one study. SQLite serialises writers with a lock: each connection
waits up to :data:`SQLITE_TIMEOUT` seconds for it, and a write that still finds the database
busy is retried (each of Optuna's writes is one transaction, so a retry neither loses nor
repeats one). SQLite files are put in write-ahead-log mode (readers do not block the writer,
and a commit costs about a fifth: Optuna commits every attribute on its own), which needs a
local disk: over several hosts use a server database (``postgresql://...``).
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
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


def retry(action: Callable[[], T], also: tuple[type[BaseException], ...] = ()) -> T:
    """``action()``, tried again with a random back-off while the database is busy."""
    for attempt in range(ATTEMPTS):
        try:
            return action()
        except Exception as exc:
            if not transient(exc, also) or attempt == ATTEMPTS - 1:
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


def open_storage(url: str) -> Any:
    """The Optuna storage for ``url`` (None for 'memory'); a SQLite file checked
    (:func:`check_sqlite`) and its directory made."""
    if url == "memory":
        return None
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        check_sqlite(url)
        kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT}}
    from sqlalchemy.exc import IntegrityError

    try:
        # two workers creating the tables at once: the slower one finds them made and retries
        storage = retry(
            lambda: optuna.storages.RDBStorage(url, engine_kwargs=kwargs), also=(IntegrityError,)
        )
    except ImportError as exc:
        raise DseError(
            f"storage {url}: {exc} (install the database driver, e.g. psycopg2 for postgresql)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy and driver errors are many classes
        raise DseError(f"cannot open the storage {url}: {str(exc).splitlines()[0]}") from None
    if url.startswith("sqlite:") and hasattr(storage, "engine"):
        from sqlalchemy import event

        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()  # connections from now on get the pragmas
    return storage
