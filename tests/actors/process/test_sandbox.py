"""The sandbox policy: settings, refusals, and what a real bubblewrap sandbox lets a command see and do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from actors.process import Sandbox, SandboxRefusal, SandboxUnavailable, resolve_sandbox
from actors.process import sandbox as sandbox_module
from actors.process.sandbox import _is_within
from actors.process.root_only import root_only_paths

HAVE_BWRAP = shutil.which("bwrap") is not None and sandbox_module.probe(shutil.which("bwrap") or "") is None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not usable on this machine")


def test_off_wraps_nothing():
    sandbox = resolve_sandbox("off")
    assert not sandbox.active and sandbox.kind == "off" and "setting" in sandbox.reason
    assert sandbox.wrap(["/bin/sh", "-c", "true"], "/") == ["/bin/sh", "-c", "true"]


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(ValueError, match="sandbox must be one of .* got 'maybe'"):
        resolve_sandbox("maybe")


def test_without_bwrap_auto_falls_back_and_bwrap_refuses(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    fallback = resolve_sandbox("auto")
    assert fallback.kind == "off" and "bwrap is not installed" in fallback.reason
    with pytest.raises(SandboxUnavailable, match="required but unavailable: bwrap is not installed"):
        resolve_sandbox("bwrap")


def clear_probes() -> None:
    sandbox_module.probe.cache_clear()
    sandbox_module.probe_user_namespace.cache_clear()


def test_a_broken_bwrap_is_reported_with_its_error(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    clear_probes()
    try:
        with pytest.raises(SandboxUnavailable, match="No permissions to creating new namespace"):
            resolve_sandbox("bwrap")
    finally:
        clear_probes()


def test_a_cwd_inside_a_hidden_path_is_refused(tmp_path):
    (tmp_path / "state" / "inner").mkdir(parents=True)
    sandbox = Sandbox("bwrap", executable="/usr/bin/bwrap", hidden=(str(tmp_path / "state"),))
    with pytest.raises(SandboxRefusal, match="lies inside .*state"):
        sandbox.wrap(["true"], str(tmp_path / "state" / "inner"))
    assert isinstance(SandboxRefusal("x"), OSError)  # shells report it as a start failure


# ------------------------------------------------------------------ a real sandbox


def run(sandbox: Sandbox, script: str, cwd: Path, expose: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(sandbox.wrap(["/bin/sh", "-c", script], str(cwd), expose=expose), cwd=cwd,
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def layout(tmp_path):
    work, state, elsewhere = tmp_path / "work", tmp_path / "work" / ".trellis", tmp_path / "elsewhere"
    for d in (work, state / "subagents", elsewhere):
        d.mkdir(parents=True)
    (state / "token").write_text("the-daemon-token")
    (state / "subagents" / "mine.mcp.json").write_text('{"mine": true}')
    (state / "subagents" / "sibling.mcp.json").write_text('{"sibling": true}')
    settings = tmp_path / "settings.json"
    settings.write_text('{"model": {"apiKey": "the-api-key"}}')
    sandbox = resolve_sandbox("bwrap", [state, settings])
    return sandbox, work, state, elsewhere, settings


@needs_bwrap
def test_no_daemon_process_is_visible(layout):
    sandbox, work, *_ = layout
    result = run(sandbox, "cat /proc/[0-9]*/comm", work)
    assert result.returncode == 0
    # the sandbox's own reaper, the shell and cat: nothing of the process that started it
    assert set(result.stdout.split()) <= {"bwrap", "sh", "cat"} and "bwrap" in result.stdout.split()


@needs_bwrap
def test_hidden_paths_are_gone_and_only_the_exposed_config_is_readable(layout):
    sandbox, work, state, _, settings = layout
    mine = state / "subagents" / "mine.mcp.json"
    result = run(sandbox, f"cat {state}/token; ls -A {state}/subagents; cat {mine}; "
                          f"cat {state}/subagents/sibling.mcp.json; cat {settings}", work, expose=(str(mine),))
    out = result.stdout + result.stderr
    assert "the-daemon-token" not in out and "sibling" not in out.replace("sibling.mcp.json", "")
    assert "the-api-key" not in out
    assert '{"mine": true}' in result.stdout
    assert "sibling.mcp.json" not in result.stdout  # the directory shows only what was exposed


@needs_bwrap
def test_writes_land_only_in_the_cwd_and_a_private_tmp(layout, tmp_path):
    sandbox, work, _, elsewhere, _ = layout
    marker = f"trellis-sandbox-{os.getpid()}"
    result = run(sandbox, f"echo a > in-cwd; echo b > /tmp/{marker}; echo c > {elsewhere}/x; "
                          f"echo d > $HOME/{marker} 2>/dev/null; cat /tmp/{marker}", work)
    assert (work / "in-cwd").read_text() == "a\n"
    assert result.stdout == "b\n"  # its /tmp works ...
    assert not Path(f"/tmp/{marker}").exists()  # ... and is its own
    assert not (elsewhere / "x").exists() and not Path(os.path.expanduser(f"~/{marker}")).exists()
    assert "Read-only file system" in result.stderr


@needs_bwrap
def test_exit_status_and_output_are_the_commands(layout):
    sandbox, work, *_ = layout
    result = run(sandbox, "echo out; echo err >&2; exit 7", work)
    assert (result.returncode, result.stdout, result.stderr) == (7, "out\n", "err\n")


@needs_bwrap
def test_sockets_under_run_and_the_variables_naming_them_are_out_of_reach(layout):
    import socket

    sandbox, work, *_ = layout
    directory = Path(f"/run/trellis-test-{os.getpid()}")
    directory.mkdir(exist_ok=True)
    path = directory / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        server.listen(1)
        probe = (f"python3 -c \"import socket,os; s=socket.socket(socket.AF_UNIX); "
                 f"print('env', os.environ.get('SSH_AUTH_SOCK')); s.connect('{path}'); print('connected')\"")
        env = sandbox.environment({**os.environ, "SSH_AUTH_SOCK": str(path)})
        result = subprocess.run(sandbox.wrap(["/bin/sh", "-c", probe], str(work)), cwd=work, env=env,
                                capture_output=True, text=True, timeout=30)
        assert "env None" in result.stdout and "connected" not in result.stdout
        assert "No such file" in result.stderr
    finally:
        server.close()
        path.unlink(missing_ok=True)
        directory.rmdir()


@needs_bwrap
def test_credential_files_in_the_home_are_hidden(monkeypatch):
    import tempfile

    # Not under /tmp, which the sandbox replaces with its own: a home is on the real filesystem.
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / ".bashrc").write_text("export OPENAI_API_KEY=sk-from-bashrc\n")
    (home / "notes.txt").write_text("just notes")
    work = home / "project"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    sandbox = resolve_sandbox("bwrap")
    result = run(sandbox, f"cat {home}/.ssh/id_ed25519 {home}/.bashrc {home}/notes.txt", work)
    assert "PRIVATE KEY" not in result.stdout and "sk-from-bashrc" not in result.stdout
    try:
        assert "just notes" in result.stdout  # the rest of the home stays readable
    finally:
        shutil.rmtree(root)


@needs_bwrap
def test_the_daemons_own_python_under_tmp_stays_visible_read_only(tmp_path, monkeypatch):
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    tool = prefix / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho from-the-venv\n")
    tool.chmod(0o755)
    (tmp_path / "elsewhere-in-tmp").write_text("private")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(sys, "prefix", str(prefix))
    sandbox_module.interpreter_paths_under_tmp.cache_clear()
    try:
        sandbox = resolve_sandbox("bwrap")
        result = run(sandbox, f"{tool}; cat {tmp_path}/elsewhere-in-tmp; echo x > {prefix}/written", work)
    finally:
        sandbox_module.interpreter_paths_under_tmp.cache_clear()
    assert "from-the-venv" in result.stdout
    assert "private" not in result.stdout  # the rest of the host's /tmp stays out of sight
    assert not (prefix / "written").exists()


# ------------------------------------------------------------------ capabilities and the user namespace


def argv_of(sandbox: Sandbox, cwd: Path, **kwargs) -> list[str]:
    return sandbox.wrap(["/bin/sh", "-c", "true"], str(cwd), **kwargs)


def pairs(argv: list[str], flag: str) -> list[str]:
    """The argument after each occurrence of ``flag``."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_every_capability_is_dropped_and_the_user_namespace_used_when_there_is_one(tmp_path):
    with_ns = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap", user_namespace=True), tmp_path)
    without = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap", no_user_namespace="denied"), tmp_path)
    for argv in (with_ns, without):
        assert pairs(argv, "--cap-drop") == ["ALL"]
        assert argv.index("--cap-drop") < argv.index("--")
        # No --new-session: the command stays in bwrap's process group, so a kill's SIGTERM reaches it.
        assert "--new-session" not in argv
    assert "--unshare-user" in with_ns and "--unshare-user" not in without


def test_a_bwrap_without_user_namespaces_still_sandboxes_and_says_why(tmp_path, monkeypatch, caplog):
    fake = tmp_path / "bwrap"
    # Refuses --unshare-user as a kernel without user namespaces does; runs anything else.
    fake.write_text('#!/bin/sh\nfor a in "$@"; do if [ "$a" = --unshare-user ]; then '
                    'echo "bwrap: No permissions to create new namespace" >&2; exit 1; fi; done\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    clear_probes()
    try:
        sandbox = resolve_sandbox("bwrap")
    finally:
        clear_probes()
    assert sandbox.active and not sandbox.user_namespace
    assert "No permissions to create new namespace" in sandbox.no_user_namespace
    assert sandbox.describe().startswith("bwrap (no user namespace: ") and "No permissions" in sandbox.describe()
    with caplog.at_level("WARNING", logger="trellis.sandbox"):
        sandbox_module.log_sandbox(sandbox)
    assert "no user namespace" in caplog.text and "No permissions" in caplog.text


@needs_bwrap
def test_the_probe_finds_the_user_namespace_here(tmp_path):
    sandbox = resolve_sandbox("bwrap")
    assert sandbox.user_namespace, sandbox.no_user_namespace  # CI's bwrap can make one
    assert sandbox.describe() == "bwrap"


@needs_bwrap
def test_a_command_holds_no_capability_and_cannot_undo_a_mount(layout):
    sandbox, work, state, *_ = layout
    result = run(sandbox, f"grep Cap /proc/self/status; umount {state} && echo UNMOUNTED; "
                          f"cat {state}/token; mount -o remount,rw,bind / && echo REMOUNTED; "
                          "umount -l /proc && echo PROC-GONE; echo END", work)
    caps = dict(line.split(":\t") for line in result.stdout.splitlines() if line.startswith("Cap"))
    assert caps["CapEff"] == caps["CapPrm"] == "0000000000000000", result.stdout
    assert caps["CapBnd"] == "0000000000000000" or not sandbox.user_namespace
    assert "END" in result.stdout
    for word in ("UNMOUNTED", "REMOUNTED", "PROC-GONE", "the-daemon-token"):
        assert word not in result.stdout


# ------------------------------------------------------------------ the environment


def test_a_model_run_command_gets_the_allowlist_and_the_settings_additions_only():
    daemon = {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "LC_ALL": "C", "LC_TIME": "en_GB", "TERM": "xterm",
              "TZ": "UTC", "USER": "u", "SHELL": "/bin/sh", "GITHUB_TOKEN": "ghp", "AWS_SECRET_ACCESS_KEY": "aws",
              "ANTHROPIC_API_KEY": "ant", "SSH_AUTH_SOCK": "/run/a", "GOPATH": "/go", "LD_PRELOAD": "/x.so"}
    allowed = {k: daemon[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "LC_TIME", "TERM", "TZ", "USER", "SHELL")}
    additions = (("GOPATH", None), ("MISSING", None), ("CI", "1"))
    for kind in ("bwrap", "off"):  # the allowlist is about the environment, not bubblewrap
        assert Sandbox(kind).environment(daemon, daemon) == allowed
        assert Sandbox(kind, env=additions).environment(daemon, daemon) == {**allowed, "GOPATH": "/go", "CI": "1"}


def test_shells_get_the_allowlist_and_hooks_keep_the_users_environment(monkeypatch):
    from actors.background.shell import WITHHELD, model_environment, user_environment

    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("LC_TIME", "C")
    model = model_environment()
    assert "GITHUB_TOKEN" not in model and "OPENAI_API_KEY" not in model and model["LC_TIME"] == "C"
    assert set(model) <= set(sandbox_module.ENV_ALLOWLIST) | {k for k in model if k.startswith("LC_")}
    user = user_environment()
    assert user["GITHUB_TOKEN"] == "ghp-secret" and "OPENAI_API_KEY" not in user
    assert not WITHHELD & set(user)


def test_the_refused_names_cover_every_credential_the_daemon_withholds():
    from actors.background.shell import WITHHELD
    from actors.mcp_client.server import WITHHELD as MCP_WITHHELD
    from transport.process_image import SECRET_ENV

    assert set(SECRET_ENV) | WITHHELD | MCP_WITHHELD <= sandbox_module.WITHHELD_NAMES
    for name in sandbox_module.WITHHELD_NAMES:
        with pytest.raises(ValueError, match=fr"x.env\[0\]: {name} is the daemon's own credential"):
            sandbox_module.parse_env([name], "x.env")
    # A hand-made list that names one anyway still does not pass it on.
    assert "TRELLIS_TOKEN" not in Sandbox("off", env=(("TRELLIS_TOKEN", None),)).environment(
        {}, {"TRELLIS_TOKEN": "t"})


def test_the_sandbox_setting_in_both_forms():
    from actors.process import SandboxSetting

    assert SandboxSetting.parse("off") == "off"
    assert SandboxSetting.parse({"mode": "off", "env": {"A": "1"}}) == SandboxSetting("off", (("A", "1"),))
    sandbox = resolve_sandbox(SandboxSetting("off", (("A", "1"),)))
    assert sandbox.kind == "off" and sandbox.env == (("A", "1"),)
    with pytest.raises(ValueError, match=r'sandbox.mode: must be one of .* got "docker"'):
        SandboxSetting.parse({"mode": "docker"})


def test_a_command_runners_own_variables_ride_on_top_of_the_sandboxs():
    from actors.subagents.runners import CommandRunner

    base = Sandbox("off", env=(("GOPATH", None),))
    runner = CommandRunner("agent -p {brief}", base, env=(("ANTHROPIC_API_KEY", None),))
    daemon = {"PATH": "/bin", "GOPATH": "/go", "ANTHROPIC_API_KEY": "ant", "GITHUB_TOKEN": "ghp"}
    assert runner.sandbox.environment(daemon, daemon) == {"PATH": "/bin", "GOPATH": "/go", "ANTHROPIC_API_KEY": "ant"}
    assert CommandRunner("agent", base).sandbox == base


# ------------------------------------------------------------------ the home


def test_a_cwd_at_or_above_the_home_is_refused_naming_the_rule(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    sandbox = Sandbox("bwrap", executable="/usr/bin/bwrap", user_namespace=True)
    for cwd, where in ((home, "it is the home directory"), (tmp_path, f"the home directory {home} lies inside it")):
        with pytest.raises(SandboxRefusal) as info:
            argv_of(sandbox, cwd)
        message = str(info.value)
        assert message.startswith(f"refusing to run a command in {cwd}: {where}. ")
        assert "could create what the home does not have yet" in message and "under the home" in message
    argv_of(sandbox, home / "project")  # below the home: fine
    # The passwd entry's home counts too, whatever $HOME says.
    import pwd

    passwd_home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    if not _is_within(str(home), passwd_home):
        with pytest.raises(SandboxRefusal, match=f"in {passwd_home}: it is the home directory"):
            argv_of(sandbox, Path(passwd_home))
    assert Sandbox("off").wrap(["true"], str(home)) == ["true"]  # no sandbox, no refusal


def test_the_credentials_list_names_the_agents_and_package_managers_and_follows_the_variables(tmp_path):
    from actors.process.home_secrets import HOME_SECRETS, secret_paths

    for name in (".qwen/oauth_creds.json", ".claude/.credentials.json", ".claude.json", ".codex/auth.json",
                 ".config/containers/auth.json", ".cargo/credentials.toml", ".local/state/trellis", ".npmrc",
                 ".m2/settings.xml", ".gradle/gradle.properties", ".git-credentials", ".config/git/credentials",
                 ".vault-token", ".cache/huggingface/token", ".ssh", ".bash_history"):
        assert name in HOME_SECRETS, name
    assert len(set(HOME_SECRETS)) == len(HOME_SECRETS)
    environ = {"HOME": str(tmp_path / "h"), "XDG_STATE_HOME": str(tmp_path / "state"),
               "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "CARGO_HOME": str(tmp_path / "cargo"),
               "KUBECONFIG": f"{tmp_path}/k1:{tmp_path}/k2", "DOCKER_CONFIG": "relative/ignored"}
    paths = secret_paths(environ, home_dirs=[str(tmp_path / "h")])
    for path in ("h/.ssh", "state/trellis", "cfg/containers/auth.json", "cfg/gh", "cargo/credentials.toml",
                 "k1", "k2"):
        assert str(tmp_path / path) in paths, path
    assert not any("relative" in p for p in paths)


def test_both_homes_are_searched_when_they_differ(tmp_path, monkeypatch):
    import pwd

    from actors.process.home_secrets import homes

    monkeypatch.setenv("HOME", str(tmp_path))
    passwd_home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    assert homes() == tuple(dict.fromkeys([str(tmp_path), passwd_home]))


def test_a_variable_naming_a_home_or_above_hides_nothing_there(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GNUPGHOME", str(tmp_path))  # a mistake: hiding it would hide the home and the cwd
    hidden = Sandbox("bwrap", executable="/usr/bin/bwrap").hidden_paths()
    assert str(home / ".ssh") in hidden and str(tmp_path) not in hidden and str(home) not in hidden


# ------------------------------------------------------------------ git's control files, and protect


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
def test_the_git_directory_is_pinned_and_its_control_files_bound_read_only(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".git" / "config.worktree").write_text("")
    git(repo, "config", "core.hooksPath", ".husky")
    (repo / ".husky").mkdir()
    (repo / "extra.cfg").write_text("")
    git(repo, "config", "include.path", "../extra.cfg")
    argv = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap", user_namespace=True), repo)
    dot_git = str(repo / ".git")
    assert dot_git in pairs(argv, "--bind")  # a mount point: it cannot be renamed and rebuilt
    ro = pairs(argv, "--ro-bind")
    for path in (".git/config", ".git/hooks", ".git/config.worktree", ".husky", "extra.cfg"):
        assert str(repo / path) in ro, path
    assert argv.index(dot_git) < argv.index(str(repo / ".git" / "config"))  # the pin first, then inside it


@needs_git
def test_a_missing_hooks_directory_becomes_an_empty_read_only_one(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    shutil.rmtree(repo / ".git" / "hooks")
    argv = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), repo)
    hooks = str(repo / ".git" / "hooks")
    assert hooks in pairs(argv, "--tmpfs") and hooks in pairs(argv, "--remount-ro")


@needs_git
def test_a_gitfile_is_read_only_and_the_gitdir_it_names_under_the_cwd_is_protected(tmp_path):
    main = tmp_path / "main"
    main.mkdir()
    git(main, "init", "-q")
    git(main, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one")
    git(main, "worktree", "add", "-q", str(main / "wt"))
    inside = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), main / "wt")
    assert str(main / "wt" / ".git") in pairs(inside, "--ro-bind")  # the gitfile itself
    assert not any(str(main / ".git") in p for p in pairs(inside, "--bind")[1:])  # its gitdir is outside: read-only
    whole = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), main)
    assert str(main / ".git" / "worktrees" / "wt") in pairs(whole, "--bind")
    assert str(main / ".git" / "worktrees" / "wt" / "commondir") in pairs(whole, "--ro-bind")


def test_protect_binds_paths_under_the_cwd_and_skips_what_it_need_not(tmp_path):
    (tmp_path / "check.sh").write_text("#!/bin/sh\n")
    outside = tmp_path.parent / "elsewhere.sh"
    argv = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), tmp_path,
                   protect=[str(tmp_path / "check.sh"), "missing.sh", "scripts/", str(outside)])
    assert str(tmp_path / "check.sh") in pairs(argv, "--ro-bind")
    assert str(tmp_path / "scripts") in pairs(argv, "--tmpfs") and str(tmp_path / "scripts") in pairs(argv, "--remount-ro")
    assert not any("missing.sh" in a or "elsewhere" in a for a in argv)


@needs_bwrap
@needs_git
def test_git_works_in_the_sandbox_and_its_control_files_do_not_change(tmp_path):
    import tempfile

    # Not under /tmp, which the sandbox replaces with its own.
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        repo = root / "repo"
        repo.mkdir()
        git(repo, "init", "-q")
        shutil.rmtree(repo / ".git" / "hooks")
        config = (repo / ".git" / "config").read_text()
        sandbox = resolve_sandbox("bwrap")
        script = ("echo a > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm one "
                  "&& git branch feature && git checkout -q feature && echo COMMITTED; "
                  "echo '[core]' >> .git/config || echo CONFIG-REFUSED; "
                  "echo 'touch pwned' > .git/hooks/pre-commit || echo HOOK-REFUSED; "
                  "mv .git .git.old || echo RENAME-REFUSED; rm -rf .git/hooks || echo REMOVE-REFUSED")
        result = run(sandbox, script, repo)
        for word in ("COMMITTED", "CONFIG-REFUSED", "HOOK-REFUSED", "RENAME-REFUSED", "REMOVE-REFUSED"):
            assert word in result.stdout, result.stdout + result.stderr
        assert (repo / ".git" / "config").read_text() == config
        assert os.listdir(repo / ".git" / "hooks") == []  # created empty on the host, still empty
        assert git(repo, "log", "--format=%s", "feature").split() == ["one"]
    finally:
        shutil.rmtree(root)


def test_the_sandbox_setting_takes_writable_directories_and_a_network_switch(tmp_path, monkeypatch):
    from actors.process.sandbox import SandboxSetting

    monkeypatch.setenv("HOME", str(tmp_path))
    parsed = SandboxSetting.parse({"writable": ["~/.cache/shared", "/opt/cache"], "network": "off"})
    assert parsed == SandboxSetting("auto", (), (str(tmp_path / ".cache/shared"), "/opt/cache"), "off")
    with pytest.raises(ValueError, match=r'sandbox.network: must be one of \["on", "off"\], got "none"'):
        SandboxSetting.parse({"network": "none"})
    with pytest.raises(ValueError, match=r"sandbox.writable\[0\]: must be an absolute path or start with ~/"):
        SandboxSetting.parse({"writable": ["cache"]})
    with pytest.raises(ValueError, match=r"sandbox.writable: must be an array of directory paths"):
        SandboxSetting.parse({"writable": "/opt"})


def test_a_sandbox_with_a_home_binds_it_writable_last_and_hands_it_over_as_home(tmp_path):
    home = tmp_path / "state" / "homes" / "s1"
    home.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    sandbox = Sandbox("bwrap", executable="/usr/bin/bwrap", hidden=(str(tmp_path / "state"),),
                      network=False).with_home(str(home))
    argv = sandbox.wrap(["true"], str(work))
    assert "--unshare-net" in argv
    # bound writable after the state directory is hidden, so it is there although the state directory is not
    assert argv[argv.index(str(home)) - 1] == "--bind"
    assert argv.index(str(home)) > argv.index(str(tmp_path / "state"))
    assert sandbox.environment({"HOME": "/root", "PATH": "/bin"}, {})["HOME"] == str(home)
    assert sandbox.configured_environment({"HOME": "/root"})["HOME"] == str(home)
    assert Sandbox("off").with_home(str(home)).environment({"HOME": "/root"}, {})["HOME"] == "/root"


# ------------------------------------------------------------------ renames, nested repositories, a moved cwd


def test_every_directory_between_the_cwd_and_what_is_mounted_under_it_is_pinned_first(tmp_path):
    """A mount moves with a renamed parent (``mv proj proj2``): the parents are mount points too."""
    ws = tmp_path / "ws"
    state, settings = ws / "proj" / "state", ws / "proj" / "settings.json"
    state.mkdir(parents=True)
    settings.write_text("{}")
    (ws / ".claude" / "hooks").mkdir(parents=True)
    (ws / ".claude" / "hooks" / "check.sh").write_text("#!/bin/sh\n")
    sandbox = Sandbox("bwrap", executable="/usr/bin/bwrap", hidden=(str(state), str(settings)))
    argv = argv_of(sandbox, ws, protect=[".claude/hooks/check.sh", "deep/er/hooks/"])
    bound = pairs(argv, "--bind")
    for parent in ("proj", ".claude", ".claude/hooks", "deep", "deep/er"):
        assert str(ws / parent) in bound, parent
        assert bound.index(str(ws)) < bound.index(str(ws / parent))
    assert (ws / "deep" / "er").is_dir() and not (ws / "deep" / "er" / "hooks").exists()  # bwrap makes hooks/
    assert argv.index(str(ws / "proj")) < argv.index(str(state))  # pinned before it is hidden
    assert argv.index(str(ws / ".claude" / "hooks")) < argv.index(str(ws / ".claude" / "hooks" / "check.sh"))
    assert str(ws / "proj" / "state") not in bound  # the hidden path itself is a mount already


@needs_bwrap
def test_a_parent_of_the_state_directory_or_a_hook_file_cannot_be_renamed(tmp_path):
    import tempfile

    root = Path(tempfile.mkdtemp(dir="/var/tmp"))  # not under /tmp, which the sandbox replaces
    try:
        ws = root / "ws"
        state = ws / "proj" / "state"
        state.mkdir(parents=True)
        (state / "token").write_text("the-daemon-token")
        (ws / ".claude" / "hooks").mkdir(parents=True)
        (ws / ".claude" / "hooks" / "check.sh").write_text("#!/bin/sh\n")
        sandbox = resolve_sandbox("bwrap", [state])
        result = subprocess.run(
            sandbox.wrap(["/bin/sh", "-c", "mv proj proj2 || echo PROJ-PINNED; cat proj2/state/token; "
                                           "mv .claude x || echo CLAUDE-PINNED; echo ok > work.txt"],
                         str(ws), protect=[".claude/hooks/check.sh"]),
            cwd=ws, capture_output=True, text=True, timeout=30)
        assert "PROJ-PINNED" in result.stdout and "CLAUDE-PINNED" in result.stdout, result.stdout + result.stderr
        assert "the-daemon-token" not in result.stdout + result.stderr
        assert (ws / "proj" / "state" / "token").exists() and (ws / "work.txt").read_text() == "ok\n"
    finally:
        shutil.rmtree(root)


def test_nested_repositories_are_found_within_the_bounds(tmp_path, monkeypatch):
    for repo in ("a", "b/c", "x/y/z", "deep/1/2/3", "node_modules/m", ".hidden/r", "a/sub"):
        (tmp_path / repo / ".git").mkdir(parents=True)
    (tmp_path / ".git").mkdir()  # the cwd's own: not a nested one
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / ".git").write_text("gitdir: ../somewhere\n")  # a gitfile counts
    assert sandbox_module.nested_repositories(str(tmp_path)) == [
        str(tmp_path / p) for p in ("a", "a/sub", "b/c", "f", "x/y/z")]  # depth 4, node_modules, dot-dirs: no
    monkeypatch.setattr(sandbox_module, "NESTED_ENTRIES", 3)
    assert len(sandbox_module.nested_repositories(str(tmp_path))) < 5  # the walk stops at its bound


@needs_git
def test_a_nested_repositorys_control_files_are_protected_as_the_cwds_own(tmp_path):
    git(tmp_path, "init", "-q", "vendor/lib")
    git(tmp_path / "vendor" / "lib", "config", "core.hooksPath", "githooks")
    (tmp_path / "vendor" / "lib" / "githooks").mkdir()
    pinned, read_only = sandbox_module.git_protections(str(tmp_path))
    lib = tmp_path / "vendor" / "lib"
    assert pinned == [str(lib / ".git")]
    for path in (".git/config", ".git/hooks/", "githooks/"):
        assert f"{lib}/{path}" in read_only, path
    argv = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), tmp_path)
    assert {str(tmp_path / "vendor"), str(lib), str(lib / ".git")} <= set(pairs(argv, "--bind"))


def test_a_cwd_that_no_longer_resolves_to_itself_is_refused(tmp_path):
    cwd, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, cwd)  # another session put a symlink where this session's cwd was
    sandbox = Sandbox("bwrap", executable="/usr/bin/bwrap")
    with pytest.raises(SandboxRefusal) as refused:
        argv_of(sandbox, cwd)
    assert str(refused.value) == (f"the session's working directory {cwd} was moved or replaced by a symlink since "
                                  f"the session started (it now leads to {elsewhere}); nothing was done")
    assert argv_of(sandbox, elsewhere)[-4:] == ["--", "/bin/sh", "-c", "true"]


# ------------------------------------------------------------------ writable directories under the protections


def test_writable_directories_are_bound_before_every_protection_and_the_home_last(tmp_path, monkeypatch):
    """``writable: ["~/.cache"]`` bound last covered the token hidden in it; one holding the cwd covered the
    read-only ``.git/config`` and hooks."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = tmp_path / "home" / ".cache"
    token = cache / "huggingface" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("hf_secret")
    shared = tmp_path / "shared"
    repo = shared / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    home = tmp_path / "state" / "homes" / "s1" / "commands"
    home.mkdir(parents=True)
    sandbox = Sandbox("bwrap", executable="/usr/bin/bwrap", writable=(str(cache), str(shared)),
                      hidden=(str(tmp_path / "state"),)).with_home(str(home))
    argv = argv_of(sandbox, repo)
    tmp = argv.index("/tmp", argv.index("--tmpfs"))
    bound = [i for i, a in enumerate(argv) if a == "--bind"]
    cache_at, shared_at = argv.index(str(cache)), argv.index(str(shared))
    assert tmp < cache_at < shared_at < argv.index(str(repo))  # right after the private /tmp, before the cwd
    assert argv[cache_at - 1] == argv[shared_at - 1] == "--bind"
    for protected in (token, repo / ".git" / "config", repo / ".git" / "hooks", repo / ".git"):
        assert argv.index(str(protected)) > shared_at, protected  # mounted over the writable directories
    assert bound[-1] == argv.index(str(home)) - 1  # the session's own home: last
    assert argv.index(str(home)) > argv.index(str(tmp_path / "state"))


def test_a_writable_entry_at_or_above_a_home_is_refused_naming_the_rule(tmp_path, monkeypatch):
    import pwd

    from actors.process.sandbox import SandboxSetting

    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    passwd_home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    (tmp_path / "link").symlink_to(home)
    for entry in ("~", "~/", "/", "/home", str(tmp_path / "users"), passwd_home, str(tmp_path / "link")):
        with pytest.raises(ValueError) as refused:
            SandboxSetting.parse({"writable": ["/opt/cache", entry]})
        message = str(refused.value)
        assert message.startswith(f"sandbox.writable[1]: {json.dumps(entry)} "), message
        assert "no writable directory may be at or above a home" in message and "~/.bash_profile" in message
    assert "is the home directory" in str(pytest.raises(ValueError, SandboxSetting.parse, {"writable": ["~"]}).value)
    parsed = SandboxSetting.parse({"writable": ["~/.cache", "/opt/cache"]})
    assert parsed.writable == (str(home / ".cache"), "/opt/cache")  # under the home: fine


# ------------------------------------------------------------------ worktrees and submodules, bounded


def test_submodule_git_directories_are_found_and_protected(tmp_path):
    for name in ("lib", "vendor/deep/x"):
        gitdir = tmp_path / ".git" / "modules" / name
        (gitdir / "hooks").mkdir(parents=True)
        (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
        (gitdir / "config").write_text("[core]\n")
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    pinned, read_only = sandbox_module.git_protections(str(tmp_path))
    for name in ("lib", "vendor/deep/x"):
        gitdir = tmp_path / ".git" / "modules" / name
        assert str(gitdir) in pinned and str(gitdir / "config") in read_only and f"{gitdir}/hooks/" in read_only


def test_a_deep_chain_under_modules_neither_recurses_nor_goes_unprotected(tmp_path):
    """``mkdir -p .git/modules/a/a/a/...`` 1,500 levels: RecursionError (no OSError) escaped wrap() and
    every file-tool write's ask_always."""
    deep = tmp_path / ".git" / "modules"
    from actors.tools.paths import Scope

    path = str(deep)
    os.makedirs(path)
    try:
        for _ in range(1500):  # os.makedirs itself recurses that deep
            path = os.path.join(path, "a")
            os.mkdir(path)
        pinned, read_only = sandbox_module.git_protections(str(tmp_path))  # no RecursionError
        assert f"{deep}/" in read_only  # the walk could not finish: the whole directory read-only
        argv = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), tmp_path)
        assert str(deep) in pairs(argv, "--ro-bind")
        assert Scope(str(tmp_path)).ask_always(str(deep / "a" / "a" / "config")) is not None
    finally:  # one level at a time: rmtree (pytest's cleanup too) recurses as deep
        while path != str(deep):
            os.rmdir(path)
            path = os.path.dirname(path)


def test_a_wide_worktrees_or_modules_directory_adds_one_mount_not_thousands(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for n in range(sandbox_module.GITDIR_LIMIT + 50):
        (tmp_path / ".git" / "worktrees" / f"w{n}").mkdir(parents=True)
    argv = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), tmp_path)
    # was a --bind for every one of them; the fixed mounts (/proc/sys, a root daemon's SYSTEM_SECRETS) stay under
    # 90, beside the three words each file the host's root alone may read takes (root_only: the host's own count)
    fixed = 90 + 3 * len(root_only_paths())
    assert len(argv) < fixed, len(argv)
    assert str(tmp_path / ".git" / "worktrees") in pairs(argv, "--ro-bind")
    shutil.rmtree(tmp_path / ".git" / "worktrees")
    monkeypatch.setattr(sandbox_module, "GITDIR_ENTRIES", 100)
    for n in range(150):  # wider than the entries read: none is a git directory, but one might be
        (tmp_path / ".git" / "modules" / f"m{n}").mkdir(parents=True)
    argv = argv_of(Sandbox("bwrap", executable="/usr/bin/bwrap"), tmp_path)
    assert len(argv) < fixed, len(argv)
    assert str(tmp_path / ".git" / "modules") in pairs(argv, "--ro-bind")
    (tmp_path / ".git" / "worktrees" / "one").mkdir(parents=True)  # within the bounds: each protected
    assert str(tmp_path / ".git" / "worktrees" / "one") in sandbox_module.git_protections(str(tmp_path))[0]


# ------------------------------------------------------------------ homes: made, removed, cleared at start


def wait_gone(path: Path, seconds: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not path.exists(), path


def test_a_stale_home_is_moved_aside_and_deleted_off_the_calling_thread(tmp_path, monkeypatch):
    import threading

    real_rmtree = shutil.rmtree
    threads = []

    def rmtree(path, *args, **kwargs):
        threads.append(threading.current_thread())
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(sandbox_module.shutil, "rmtree", rmtree)
    stale = tmp_path / "homes" / "s1" / "commands"
    (stale / ".npm" / "cache").mkdir(parents=True)
    (stale / ".npm" / "cache" / "blob").write_text("x" * 1000)
    home = sandbox_module.make_home(str(tmp_path), "s1/commands")
    assert home == str(stale) and os.listdir(home) == []  # made afresh at once
    assert threads and threading.main_thread() not in threads  # the big tree went in a thread of its own
    leftovers = [p for p in (tmp_path / "homes").iterdir() if p.name.startswith(".removing-")]
    for path in leftovers:
        wait_gone(path)


def test_a_removal_under_way_never_deletes_the_home_made_again_at_its_path(tmp_path, monkeypatch):
    import threading

    real_rmtree = shutil.rmtree
    release = threading.Event()

    def slow_rmtree(path, *args, **kwargs):  # the removal thread of a big home, still at work
        if threading.current_thread() is not threading.main_thread():
            release.wait(10)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(sandbox_module.shutil, "rmtree", slow_rmtree)
    home = Path(sandbox_module.make_home(str(tmp_path), "s1/commands"))
    (home / "old").write_text("old")
    sandbox_module.remove_home(str(tmp_path / "homes" / "s1"))  # the session's homes, as a whole
    again = Path(sandbox_module.make_home(str(tmp_path), "s1/commands"))  # the same id restored at once
    (again / "new").write_text("new")
    release.set()
    for path in [p for p in (tmp_path / "homes").iterdir() if p.name.startswith(".removing-")]:
        wait_gone(path)
    assert (again / "new").read_text() == "new" and not (again / "old").exists()


def test_clear_homes_moves_every_home_aside_at_once_and_deletes_them_in_a_thread(tmp_path):
    for name in ("s1/commands/.npm/x", "s1/servers/.cache", "subagent-a-1/.qwen", ".removing-s2-abc/f"):
        (tmp_path / "homes" / name).mkdir(parents=True)
    sandbox_module.clear_homes(str(tmp_path))
    assert not (tmp_path / "homes").exists()  # gone at once: the homes made from now on start afresh
    wait_gone(tmp_path / "homes.removing")
    assert Path(sandbox_module.make_home(str(tmp_path), "s1/commands")).is_dir()
    sandbox_module.clear_homes(str(tmp_path / "nothing-here"))  # no homes: nothing to do
    sandbox_module.clear_homes(None)


async def test_the_daemon_clears_the_homes_a_previous_daemon_left_at_start(tmp_path):
    from actors.daemon import open_daemon

    left = tmp_path / "state" / "homes" / "s1" / "commands" / ".npm"
    left.mkdir(parents=True)
    async with open_daemon(state_dir=tmp_path / "state"):
        assert not (tmp_path / "state" / "homes").exists()
