"""A PostgreSQL server of a test session's own: Debian's ``initdb`` into a temporary folder, a
free port, a role with a password and a database per test, as a team would set one up.

The server runs as the ``postgres`` system user (initdb and postgres refuse root), listens on
127.0.0.1 (and on addresses the caller names, e.g. an emulated cluster's host side) and trusts
only its own socket folder, which only its user reaches. It is stopped and its folder removed
at the end, and also when the test process is killed: a watchdog process
(``python -m tests.helpers.postgres watch ...``) outlives it and does the same once it is gone.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.cli import pid_alive

#: Where Debian's packages put a server's programs, one folder per major version.
BINDIRS = "/usr/lib/postgresql/*/bin"
#: The system user Debian's package makes to run servers.
SYSTEM_USER = "postgres"
#: The prefix of the servers' temporary folders (``<prefix><pid of the test process>-...``).
PREFIX = "dse-pg-"
#: The role the tests' sweeps log in as.
ROLE = "dse"


def bindir() -> Path | None:
    """The newest installed server's programs (initdb, postgres), or None."""
    found = [
        Path(d)
        for d in glob.glob(BINDIRS)
        if (Path(d) / "initdb").exists() and (Path(d) / "postgres").exists()
    ]
    found.sort(key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    return found[-1] if found else None


def missing() -> str | None:
    """Why no server can start here, or None."""
    if bindir() is None:
        return f"no PostgreSQL server under {BINDIRS} (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            return f"no '{SYSTEM_USER}' system user to run the server as (root cannot)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running server: ``url(db)`` for a client, ``PGPASSWORD`` in ``env`` for libpq."""

    root: Path
    port: int
    hosts: tuple[str, ...]
    password: str
    proc: subprocess.Popen
    watchdog: subprocess.Popen | None = None
    databases: list[str] = field(default_factory=list)

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def env(self) -> dict[str, str]:
        """What a worker's environment adds: the password, read by libpq."""
        return {"PGPASSWORD": self.password}

    def url(self, database: str, host: str = "127.0.0.1") -> str:
        """The URL a user writes: no password in it."""
        return f"postgresql://{ROLE}@{host}:{self.port}/{database}"

    def admin(self, sql: str, database: str = "postgres") -> None:
        """Run ``sql`` as the superuser, over the server's own socket."""
        import psycopg

        with psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user=SYSTEM_USER,
            dbname=database,
            autocommit=True,
        ) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def database(self, name: str | None = None) -> str:
        """A new database owned by the tests' role (a name of its own unless given)."""
        name = name or f"t_{uuid.uuid4().hex[:10]}"
        self.admin(f'CREATE DATABASE "{name}" OWNER {ROLE}')
        self.databases.append(name)
        return name

    def stop(self) -> None:
        """Stop the server (a fast shutdown), its watchdog, and remove its folder."""
        stop(self.proc.pid, self.root)
        self.proc.wait()
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.kill()
            self.watchdog.wait()


def stop(postmaster: int, root: Path, timeout_s: float = 10.0) -> None:
    """Stop the server ``postmaster`` (fast, then immediate) and remove ``root``."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
        try:
            os.kill(postmaster, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout_s
        while pid_alive(postmaster) and not zombie(postmaster) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not pid_alive(postmaster) or zombie(postmaster):
            break
    shutil.rmtree(root, ignore_errors=True)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _as_user() -> dict:
    """Popen's arguments that run a program as the server's system user (when root)."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(SYSTEM_USER)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def remove_orphans() -> None:
    """Servers of earlier test processes that are gone (their watchdog was killed too)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        owner = folder.name[len(PREFIX) :].split("-")[0]
        if not owner.isdigit() or pid_alive(int(owner)):
            continue
        pidfile = folder / "data" / "postmaster.pid"
        try:
            postmaster = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            postmaster = 0
        if postmaster and pid_alive(postmaster):
            stop(postmaster, folder)
        shutil.rmtree(folder, ignore_errors=True)


def start(hosts: tuple[str, ...] = ("127.0.0.1",), clients: tuple[str, ...] = ()) -> Server:
    """A new server listening on ``hosts``, taking password logins from ``hosts`` and the
    networks ``clients`` (CIDR), with the role :data:`ROLE` and a random password."""
    why = missing()
    if why:
        raise RuntimeError(why)
    programs = bindir()
    assert programs is not None
    remove_orphans()
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    data, run = root / "data", root / "run"
    run.mkdir()
    user = _as_user()
    if user:
        for p in (root, run):
            os.chown(p, user["user"], user["group"])
    os.chmod(root, 0o700)
    watchdog = None
    proc = None
    try:
        subprocess.run(
            [
                str(programs / "initdb"),
                "-D",
                str(data),
                "-U",
                SYSTEM_USER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
                "--no-instructions",
                "-E",
                "UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=root,
            **user,
        )
        nets = [*(f"{h}/32" for h in hosts), *clients]
        hba = "local all all trust\n" + "".join(f"host all all {n} scram-sha-256\n" for n in nets)
        (data / "pg_hba.conf").write_text(hba)
        port = free_port()
        proc = subprocess.Popen(
            [
                str(programs / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-k",
                str(run),
                "-c",
                f"listen_addresses={','.join(hosts)}",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(root / "server.log", "w"),  # noqa: SIM115 - the child keeps it
            cwd=root,
            start_new_session=True,
            **user,
        )
        watchdog = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers.postgres",
                "watch",
                str(os.getpid()),
                str(proc.pid),
                str(root),
            ],  # fmt: skip
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        server = Server(root, port, hosts, secrets.token_urlsafe(18), proc, watchdog)
        _ready(server)
        server.admin(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{server.password}'")
        return server
    except BaseException:
        if proc is not None:
            stop(proc.pid, root)
            proc.wait()
        if watchdog is not None:
            watchdog.kill()
            watchdog.wait()
        shutil.rmtree(root, ignore_errors=True)
        raise


def _ready(server: Server, timeout_s: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        if server.proc.poll() is not None:
            log = (server.root / "server.log").read_text()[-2000:]
            raise RuntimeError(f"the PostgreSQL server exited {server.proc.returncode}:\n{log}")
        try:
            psycopg.connect(
                host=str(server.socket_dir), port=server.port, user=SYSTEM_USER, dbname="postgres"
            ).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def watch(owner: int, postmaster: int, root: Path) -> None:
    """Until ``owner`` (the test process) is gone, then stop the server and remove ``root``."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while pid_alive(owner) and pid_alive(postmaster):
        time.sleep(0.5)
    if pid_alive(postmaster):
        stop(postmaster, root)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["watch"] and len(sys.argv) == 5:
        watch(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
