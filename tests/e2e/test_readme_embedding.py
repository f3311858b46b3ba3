"""The documented embedding example (docs/how-to/embedding.md) runs as written — also while port 4170 is taken."""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "embedding.md"
PROXY_VARS = {"http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"}


def embedding_example() -> str:
    text = GUIDE.read_text()
    section = text[text.index("\n## A complete example\n"):]
    section = section[:section.index("\n## ", 1)]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the guide's example section has no python block"
    return match.group(1)


def hold_port(port: int) -> socket.socket | None:
    """A listening socket on 127.0.0.1:``port``; ``None`` when something else holds it already."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        assert exc.errno == errno.EADDRINUSE, exc
        return None
    sock.listen()
    return sock


def test_the_embedding_example_runs_as_written_with_4170_taken(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(embedding_example())
    held = hold_port(4170)  # taken either way: by us, or by whatever holds it
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS and k not in ("TRELLIS_TOKEN", "OPENAI_API_KEY")}
    try:
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    finally:
        if held is not None:
            held.close()
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("turn_complete ") for line in lines), done.stdout
    [serving] = [line for line in lines if line.startswith("serving on ")]
    url, model = serving.split()[2:]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url) and not url.endswith(":4170"), serving
    assert model == "scripted"
    assert (tmp_path / ".trellis" / "token").exists()  # minted where the example reads it
