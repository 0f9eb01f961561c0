"""A real PostgreSQL server for the tests: made by ``initdb`` in a temporary folder, started
and stopped by ``pg_ctl`` on a free 127.0.0.1 port, with a password login; killed (every
process of it, SIGKILL) and started again by the outage tests.

Written here rather than taken from pytest-postgresql: PostgreSQL refuses to run as root,
and CI runs the tests as root, so its commands run as the user ``postgres`` there (which
Debian's package makes); and the outage tests kill the server and start it again on the
same data and port, mid-test.
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
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg

USER = "specem"
"""The server's superuser, which the tests log in as."""
RUN_AS = "postgres"
"""The system user the server runs as where the tests run as root."""
INSTALL = "apt-get install -y postgresql"


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: ``$SPECEM_TEST_PG_BIN``, Debian's newest
    ``/usr/lib/postgresql/*/bin``, or the one on the PATH."""
    given = os.environ.get("SPECEM_TEST_PG_BIN")
    if given:
        return Path(given)
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    if debian:
        return Path(debian[-1]).parent
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def _version(path: str) -> float:
    try:
        return float(Path(path).parts[-3])
    except ValueError:
        return 0.0


def missing() -> str | None:
    """Why a PostgreSQL server cannot run here (None: it can)."""
    folder = binaries()
    if folder is None or not (folder / "initdb").exists():
        return f"PostgreSQL is not installed (no initdb, pg_ctl): {INSTALL}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root, and there is no user {RUN_AS!r} to run PostgreSQL as"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PostgresServer:
    """One PostgreSQL server in a folder of its own (see the module)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.port = free_port()
        self.password = secrets.token_urlsafe(12)
        self.bin = binaries()
        assert self.bin is not None, missing()

    @classmethod
    @contextmanager
    def running(cls) -> Iterator[PostgresServer]:
        """A new server for the block, its folder deleted after it."""
        folder = Path(tempfile.mkdtemp(prefix="specem-pg-"))
        try:
            server = cls(folder)
            server.init()
            server.start()
            try:
                yield server
            finally:
                server.stop()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{USER}:{secret}@127.0.0.1:{self.port}/{database}"

    def _command(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:  # PostgreSQL refuses root
            command = ["runuser", "-u", RUN_AS, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=check)

    def init(self) -> None:
        if os.geteuid() == 0:
            owner = pwd.getpwnam(RUN_AS)
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        secret = self.folder / "password"
        secret.write_text(self.password + "\n")
        if os.geteuid() == 0:
            os.chown(secret, owner.pw_uid, owner.pw_gid)
        self._command(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={secret}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        )

    def start(self) -> None:
        """Start the server (after a kill: it recovers) and wait until it takes logins."""
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200"
        )
        result = self._command(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
            check=False,
        )
        assert result.returncode == 0, f"{result.stderr}\n{self.log.read_text()}"

    def stop(self) -> None:
        self._command("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop", check=False)

    def processes(self) -> list[int]:
        """The server's process ids: the postmaster's and its children's."""
        pidfile = self.data / "postmaster.pid"
        if not pidfile.exists():
            return []
        main = int(pidfile.read_text().split()[0])
        children = []
        for stat in glob.glob("/proc/[0-9]*/stat"):
            with suppress(OSError):
                # the name in brackets may hold spaces: the parent is 2 fields after its end
                parent = int(Path(stat).read_text().rpartition(")")[2].split()[1])
                if parent == main:
                    children.append(int(Path(stat).parts[2]))
        return [main, *children]

    def kill(self) -> None:
        """Kill every process of the server at once (SIGKILL), as an out-of-memory killer
        or a lost machine would, and wait until they are gone."""
        pids = self.processes()
        assert pids, "the server is not running"
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in pids):
            assert time.monotonic() < deadline, "the server's processes did not end"
            time.sleep(0.05)
        # the postmaster is pg_ctl's orphan, whose zombie PID 1 reaps in its own time; until
        # then PostgreSQL would take its lock files for a live server's
        if _zombie(pids[0]):
            for lock in (self.data / "postmaster.pid", self.folder / f".s.PGSQL.{self.port}.lock"):
                lock.unlink(missing_ok=True)

    def new_database(self) -> str:
        """A new empty database's URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return False
