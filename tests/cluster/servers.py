"""Real PostgreSQL and Redis servers for the cluster tests, from Debian's packages, on loopback ports.

Each is started in a fresh directory of its own and stopped at the end of the
test session. Both require a password, as a node insists
(``actors/cluster/exposure.py``): the URLs carry it. PostgreSQL's role
``open`` alone logs in without one, and ``Redis(password=None)`` takes none,
for the tests of that refusal. PostgreSQL refuses to run as root, so where the tests run as
root its data directory belongs to the ``postgres`` user and its programs run
as that user. :func:`skip_reason` says why a server cannot be started here.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's ``bin`` directory (Debian keeps them under /usr/lib/postgresql)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def skip_reason() -> str | None:
    """Why the cluster tests cannot run here, or ``None``."""
    missing = []
    if postgres_bin() is None:
        missing.append("PostgreSQL (Debian package postgresql: initdb, pg_ctl)")
    if shutil.which("redis-server") is None:
        missing.append("Redis (Debian package redis-server)")
    try:
        import coredis  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        missing.append(f"the cluster extra (pip install -e '.[cluster]'): {exc.name}")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            missing.append("a 'postgres' user to run PostgreSQL as (the tests run as root)")
    return ("not installed: " + "; ".join(missing)) if missing else None


def _wait_port(port: int, what: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s; "
                       f"its log:\n{log.read_text(errors='replace') if log.exists() else '(none)'}")


class Postgres:
    """A throwaway PostgreSQL cluster; :attr:`url` names a database the tests may use."""

    def __init__(self) -> None:
        bindir = postgres_bin()
        assert bindir is not None, skip_reason()
        self.root = Path(tempfile.mkdtemp(prefix="trellis-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = _free_port()
        self._bin = bindir
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.password = secrets.token_hex(12)
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self._as:
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        self._run([str(bindir / "initdb"), "-D", str(self.data), "-U", "trellis", "--auth=scram-sha-256",
                   f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"])
        pwfile.unlink()
        # Role "open" logs in without a password (trust), for the tests of a node's refusal of that.
        hba = self.data / "pg_hba.conf"
        hba.write_text("host all open 127.0.0.1/32 trust\n" + hba.read_text())
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run([str(bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                   "start"])
        _wait_port(self.port, "PostgreSQL", self.log)
        self.url = f"postgresql://trellis:{self.password}@127.0.0.1:{self.port}/postgres"
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE ROLE open LOGIN SUPERUSER")

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(self._as + argv, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr or done.stdout}")

    def database(self, name: str) -> str:
        """A fresh, empty database ``name``; its URL."""
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://trellis:{self.password}@127.0.0.1:{self.port}/{name}"

    def open_url(self, database: str) -> str:
        """``database`` as the role that needs no password (trust)."""
        return f"postgresql://open@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        try:
            self._run([str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _quoted(text: str) -> str:
    """``text`` as one double-quoted argument of a Redis config line."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _resp(*words: str) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w.encode()) for w in words)


class Redis:
    """A throwaway Redis server without persistence; :attr:`url`. It requires :attr:`password` unless that is
    ``None``."""

    def __init__(self, password: str | None = "") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="trellis-redis-"))
        self.port = _free_port()
        self.log = self.root / "redis.log"
        self.password = secrets.token_hex(12) if password == "" else password
        config = self.root / "redis.conf"  # the password in a file, not on a command line
        # Quoted, so a password with spaces is one argument (Redis reads a config line as a shell would).
        config.write_text(f"requirepass {_quoted(self.password)}\n" if self.password else "")
        self._process = subprocess.Popen(
            ["redis-server", str(config), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--databases", "256", "--dir", str(self.root), "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.port, "Redis", self.log)
        self._userinfo = f":{quote(self.password, safe='')}@" if self.password else ""  # percent-encoded
        self.url = f"redis://{self._userinfo}127.0.0.1:{self.port}/0"

    def database(self, number: int) -> str:
        """The URL of logical database ``number`` (0 to 255), emptied first."""
        commands = [_resp("AUTH", self.password)] if self.password else []
        commands += [_resp("SELECT", str(number)), _resp("FLUSHDB")]
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"".join(commands))
            reply = b""
            while reply.count(b"\r\n") < len(commands):
                reply += s.recv(4096)
        if reply != b"+OK\r\n" * len(commands):
            raise RuntimeError(f"Redis refused AUTH / SELECT {number} / FLUSHDB: {reply!r}")
        return f"redis://{self._userinfo}127.0.0.1:{self.port}/{number}"

    def stop(self) -> None:
        self._process.kill()
        self._process.wait()
        shutil.rmtree(self.root, ignore_errors=True)
