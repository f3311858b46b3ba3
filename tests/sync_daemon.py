"""A real daemon as a plain subprocess, for tests that are not Trio (pexpect, Playwright).

:class:`Daemon` runs ``python -m transport`` with the scripted model on a port
and state directory it keeps across restarts; :class:`Proxy` is a TCP forwarder
whose connections a test can cut, to see a client reconnect.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from transport.process_image import SECRET_ENV

WAIT = 10.0  # seconds for a turn to end (wait_turn)


def environ(**extra: str) -> dict[str, str]:
    # COLUMNS and LINES: a test's terminal has the size it gives it (pytest-xdist's workers export 80x24).
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV and k not in ("NO_COLOR", "COLUMNS", "LINES")}
    return env | extra


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text(body: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": body}]}



class Daemon:
    """``python -m transport`` with the scripted model, on a port and a state directory it keeps across restarts."""

    def __init__(self, tmp: Path, port: int = 0) -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.runs = 0

    def start(self, script: list[Any], settings: dict[str, Any] | None = None, *extra: str) -> Daemon:
        self.runs += 1
        script_file = self.tmp / f"script-{self.runs}.json"
        script_file.write_text(json.dumps({"responses": script}))
        args = [sys.executable, "-m", "transport", "--port", str(self.port), "--state-dir", str(self.state),
                "--script", str(script_file), *extra]
        if "--workspace" not in extra:
            # Not the directory the tests run in: that is this project's git repository, and the Web Shell's
            # git routes (checkout, commit) act on the workspace, so a fuzzed request would change it.
            (self.tmp / "workspace").mkdir(exist_ok=True)
            args += ["--workspace", str(self.tmp / "workspace")]
        if settings is not None:
            settings_file = self.tmp / f"settings-{self.runs}.json"
            settings_file.write_text(json.dumps(settings))
            args += ["--settings", str(settings_file)]
        with open(self.tmp / "daemon.log", "ab") as log:
            self.proc = subprocess.Popen(args, env=environ(), stdout=subprocess.PIPE, stderr=log)
        line = b""
        deadline = time.monotonic() + 20
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            chunk = os.read(self.proc.stdout.fileno(), 4096) if ready else b""  # type: ignore[union-attr]
            if not chunk:
                raise AssertionError(f"the daemon did not start: {line!r}\n{(self.tmp / 'daemon.log').read_text()}")
            line += chunk
        self.url = line.decode().split()[-1]
        return self

    def client(self) -> httpx.Client:
        token = (self.state / "token").read_text().strip()
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=10,
                            trust_env=False)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()



def wait_turn(client: httpx.Client, sid: str, prompt_id: str, timeout: float = WAIT) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        record = client.get(f"/session/{sid}/turns/{prompt_id}").json()
        if record.get("state") in ("completed", "cancelled", "error"):
            return record
        assert time.monotonic() < deadline, record
        time.sleep(0.05)




class Proxy:
    """A TCP forwarder to the daemon whose connections can be cut, and new ones refused for a while."""

    def __init__(self, target: int, port: int) -> None:
        self.target = target
        self.port = port
        self.listener = socket.create_server(("127.0.0.1", port))
        self.up = True
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                conn.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.open += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self.up = False
        for s in self.open:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.open.clear()

    def close(self) -> None:
        self.cut()
