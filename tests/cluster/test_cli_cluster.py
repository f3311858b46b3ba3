"""Cluster mode's command line: what it refuses, where its settings come from, and that its URLs stay secret."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from transport.bootstrap import UsageError, _passwords, cluster_config
from transport.cli import build_parser
from transport.process_image import withhold
from actors.settings import Settings
from actors.settings_file import settings_from_dict

from .nodes import cluster, text, wait_turn


def config(argv: list[str], environ: dict[str, str] | None = None, settings: Settings | None = None,
           token: str | None = "t" * 32):
    parser = build_parser()
    try:
        return cluster_config(parser.parse_args(argv), environ or {}, token, True, settings or Settings())
    except UsageError as exc:  # as python -m transport reports it
        parser.error(str(exc))


def test_a_single_daemon_unless_both_store_and_events_are_given(capsys):
    assert config([]) is None
    for argv in (["--store", "postgresql://h/db"], ["--events", "redis://h"]):
        with pytest.raises(SystemExit) as exc:
            config(argv)
        assert exc.value.code == 2
        assert "needs both --store" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        config(["--node-id", "a"])
    assert "--node-id is for cluster mode" in capsys.readouterr().err


def test_cluster_mode_needs_a_shared_token(capsys):
    with pytest.raises(SystemExit):
        config(["--store", "postgresql://h/db", "--events", "redis://h"], token=None)
    assert "the token every node shares" in capsys.readouterr().err


def test_bad_values_are_refused_naming_what(capsys):
    for argv, says in ((["--store", "mysql://h/db", "--events", "redis://h"], "postgresql:// URL"),
                       (["--store", "postgresql://h/db", "--events", "redis://h", "--node-id", "a b"], "node id"),
                       (["--store", "postgresql://h/db", "--events", "redis://h", "--lease-seconds", "0.1"],
                        "lease seconds"),
                       (["--store", "postgresql://h/db", "--events", "redis://h", "--advertise-url", "h:1"],
                        "advertise URL")):
        with pytest.raises(SystemExit):
            config(argv)
        assert says in capsys.readouterr().err


def test_flags_then_environment_then_settings():
    settings = settings_from_dict({"cluster": {"store": "postgresql://s/db", "events": "redis://s", "nodeId": "s1",
                                               "advertiseUrl": "http://s:1", "leaseSeconds": 2.5}})
    from_settings = config([], settings=settings)
    assert (from_settings.store_url, from_settings.events_url, from_settings.node_id, from_settings.advertise_url,
            from_settings.lease_seconds) == ("postgresql://s/db", "redis://s", "s1", "http://s:1", 2.5)
    env = {"TRELLIS_STORE": "postgresql://e/db", "TRELLIS_EVENTS": "redis://e"}
    from_env = config([], env, settings)
    assert (from_env.store_url, from_env.events_url, from_env.node_id) == ("postgresql://e/db", "redis://e", "s1")
    flags = config(["--store", "postgresql://f/db", "--events", "redis://f", "--node-id", "f1"], env, settings)
    assert (flags.store_url, flags.events_url, flags.node_id) == ("postgresql://f/db", "redis://f", "f1")


def test_cluster_settings_are_checked():
    with pytest.raises(Exception, match="cluster.leaseSeconds: must be a positive number"):
        settings_from_dict({"cluster": {"leaseSeconds": "soon"}})
    with pytest.raises(Exception, match="cluster: must be an object"):
        settings_from_dict({"cluster": "postgresql://x"})


def test_the_urls_are_secrets_withheld_from_the_process_image():
    assert _passwords("postgresql://u:hunter2@h/db") == ("hunter2",)
    assert _passwords("postgresql://u@h/db") == () and _passwords("redis://h:6379") == ()
    # Written percent-encoded, used decoded: both are kept out of the log.
    assert _passwords("redis://:p%2Fw%40d@h:6379") == ("p%2Fw%40d", "p/w@d")
    assert _passwords("postgresql://h/db?sslmode=require&password=s3cr@t") == ("s3cr@t",)
    argv = ["--store", "postgresql://u:hunter2@h/db", "--events=redis://:pw@h", "--node-id", "a"]
    clean, env, secrets = withhold(argv, {"TRELLIS_STORE": "postgresql://u:x@h/db", "PATH": "/bin"})
    assert clean == ["--node-id", "a"] and "TRELLIS_STORE" not in env and env["PATH"] == "/bin"
    assert dict(secrets.flags) == {"store": "postgresql://u:hunter2@h/db", "events": "redis://:pw@h"}


async def test_a_node_keeps_its_store_password_out_of_proc_and_logs(tmp_path, postgres_url, redis_url):
    # The test server's real password (it requires one): a marker that must appear nowhere.
    secret = urlsplit(postgres_url).password
    store = postgres_url
    async with cluster(tmp_path, store, redis_url) as c:
        a = await c.start("a", {"responses": [[{"text": "ok"}]]})
        sid = (await a.client.post("/session", json={})).json()["sessionId"]
        done = (await a.client.post(f"/session/{sid}/prompt", json=text("hi"))).json()["promptId"]
        assert (await wait_turn(a.client, sid, done))["state"] == "completed"
        pid = a.proc.pid
        image = Path(f"/proc/{pid}/environ").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()
        assert secret.encode() not in image
        await trio.sleep(0)
    assert secret not in a.log_text()
    assert json.dumps(secret) not in a.log_text()
