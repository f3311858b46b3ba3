"""The files in a user's home that hold credentials: hidden from sandboxed commands, refused by the file tools.

One maintained list, grouped by who writes each file. A path is relative to
the home; a directory hides everything in it. The sandbox hides what exists
when a command starts (:func:`secret_paths` resolves them; bubblewrap cannot
put a mount over a path that does not exist on a read-only filesystem — the
sandbox's refusal of a cwd at or above the home keeps such paths from being
created); the file tools refuse every listed path whether it exists or not.

Besides the home itself, a path under ``.config/``, ``.local/share/``,
``.local/state/`` or ``.cache/`` is also looked up under the directory its XDG
variable names, and :data:`SECRET_PATH_VARIABLES` names the variables that move
a tool's credentials elsewhere (``CARGO_HOME``, ``DOCKER_CONFIG``,
``KUBECONFIG`` ...). Homes are both ``$HOME`` and the passwd entry's home of the
daemon's user when they differ (:func:`homes`).

To add a tool: put its file under its group, with the tool named, and a test
in ``tests/security/test_sandbox_root.py`` picks it up (it writes every entry).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable, Mapping

HOME_SECRETS: tuple[str, ...] = (
    # --- agents: API keys, OAuth tokens and the settings files that may carry either
    ".qwen/oauth_creds.json", ".qwen/.env", ".qwen/mcp-oauth-tokens.json",  # Qwen Code
    ".claude/.credentials.json", ".claude.json", ".claude/settings.json",  # Claude Code (its env block)
    ".codex/auth.json",  # Codex CLI
    ".gemini/oauth_creds.json", ".gemini/.env", ".gemini/google_accounts.json",  # Gemini CLI
    ".gemini/mcp-oauth-tokens.json",
    ".env",  # Gemini and Qwen Code read ~/.env for their keys
    ".aider.conf.yml", ".aider/oauth-keys.env",  # aider
    ".config/github-copilot", ".copilot",  # GitHub Copilot (editor plugins, copilot CLI)
    ".local/share/opencode/auth.json",  # opencode
    ".config/goose/secrets.yaml",  # goose without a keyring
    ".continue",  # Continue (config.json/config.yaml hold apiKey)
    ".config/io.datasette.llm/keys.json",  # llm
    ".cache/huggingface/token", ".cache/huggingface/stored_tokens", ".huggingface/token",  # Hugging Face
    # --- editors and desktop apps: MCP server configs carry API keys in their env blocks
    ".cursor/mcp.json", ".config/Cursor/User/globalStorage",  # Cursor (its sign-in tokens: state.vscdb)
    ".config/Code/User/mcp.json", ".config/Code/User/globalStorage",  # VS Code (MCP servers, extension tokens)
    ".codeium/windsurf/mcp_config.json", ".codeium/config.json",  # Windsurf, Codeium
    ".config/Claude/claude_desktop_config.json",  # Claude Desktop
    # --- package managers and registries
    ".cargo/credentials.toml", ".cargo/credentials",  # cargo
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".bunfig.toml",  # npm, pnpm, yarn, bun (registry tokens)
    ".pypirc", ".config/pip/pip.conf", ".pip/pip.conf",  # twine, pip (index URLs with passwords)
    ".config/pypoetry/auth.toml", ".local/share/uv/credentials",  # poetry, uv
    ".condarc",  # conda channel tokens
    ".gem/credentials", ".local/share/gem/credentials", ".bundle/config",  # gem, bundler
    ".composer/auth.json", ".config/composer/auth.json",  # composer
    ".nuget/NuGet/NuGet.Config", ".config/NuGet/NuGet.Config",  # nuget
    ".m2/settings.xml", ".m2/settings-security.xml",  # maven
    ".gradle/gradle.properties",  # gradle
    ".config/dart/pub-credentials.json", ".pub-cache/credentials.json",  # dart pub
    ".hex/hex.config",  # hex (Elixir)
    # --- containers, clusters and clouds
    ".docker",  # docker (config.json auths)
    ".config/containers/auth.json",  # podman, buildah, skopeo
    ".kube",  # kubectl
    ".config/helm/registry/config.json", ".config/helm/repositories.yaml",  # helm
    ".aws", ".azure", ".config/gcloud", ".oci",  # AWS, Azure, Google Cloud, Oracle Cloud
    ".config/doctl", ".config/hcloud", ".config/linode-cli", ".config/openstack/clouds.yaml",
    ".terraform.d/credentials.tfrc.json", ".terraformrc",  # terraform
    ".vault-token",  # HashiCorp Vault
    ".config/rclone/rclone.conf", ".s3cfg", ".mc/config.json",  # rclone, s3cmd, MinIO client
    ".fly", ".netlify", ".config/netlify", ".local/share/com.vercel.cli",  # fly.io, Netlify, Vercel
    ".wrangler", ".config/.wrangler",  # Cloudflare wrangler
    ".pgpass", ".my.cnf", ".mylogin.cnf",  # database clients
    ".pulumi/credentials.json",  # Pulumi
    ".config/ngrok", ".ngrok2",  # ngrok (authtoken in ngrok.yml)
    ".config/stripe",  # Stripe CLI (API keys in config.toml)
    ".config/configstore",  # firebase-tools and other Node CLIs keep their tokens here
    ".sentryclirc", ".circleci/cli.yml",  # sentry-cli, CircleCI CLI
    ".config/op",  # 1Password CLI (session and account config)
    # --- data platforms
    ".kaggle/kaggle.json", ".config/kaggle/kaggle.json",  # Kaggle API
    ".databrickscfg",  # Databricks CLI
    ".snowflake/connections.toml", ".snowflake/config.toml", ".snowsql/config",  # Snowflake CLIs
    ".dbt/profiles.yml",  # dbt (warehouse passwords and keys)
    # --- version control
    ".git-credentials", ".config/git/credentials",  # git's store helper
    ".config/gh", ".config/hub", ".config/glab-cli", ".config/tea",  # GitHub, GitLab, Gitea CLIs
    # --- keys, agents and password stores
    ".ssh", ".gnupg", ".netrc", ".password-store", ".local/share/keyrings", ".local/share/kwalletd",
    ".config/sops/age/keys.txt", ".config/age",  # sops's age keys, age's own
    # --- browsers and mail clients: saved passwords, cookies and session tokens of every site signed in to
    ".mozilla", ".thunderbird", ".librewolf", ".waterfox",  # Firefox and its kin, Thunderbird
    ".config/google-chrome", ".config/google-chrome-beta", ".config/google-chrome-unstable",  # Chrome
    ".config/chromium", ".config/BraveSoftware", ".config/microsoft-edge", ".config/microsoft-edge-beta",
    ".config/vivaldi", ".config/opera", ".config/epiphany",  # Chromium, Brave, Edge, Vivaldi, Opera, GNOME Web
    "snap/firefox/common/.mozilla", "snap/chromium/common/chromium",  # the snap packages' profiles
    ".var/app/org.mozilla.firefox", ".var/app/com.google.Chrome", ".var/app/org.chromium.Chromium",  # flatpak
    ".var/app/com.brave.Browser", ".var/app/org.mozilla.Thunderbird",
    # --- shells: the rc files people export API keys from, and histories that saw keys typed
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".envrc", ".config/fish",
    ".bash_history", ".zsh_history", ".histfile", ".local/share/fish/fish_history",
    ".python_history", ".node_repl_history", ".psql_history", ".mysql_history", ".sqlite_history",
    ".rediscli_history", ".irb_history", ".lesshst", ".viminfo",
    # --- trellis itself: a state directory in the home (its token file), the prompt history of `trellis attach`
    ".trellis", ".local/state/trellis",
)

# A path under one of these prefixes also lives where the XDG variable says, when it is set.
XDG_PREFIXES: dict[str, str] = {
    ".config/": "XDG_CONFIG_HOME", ".local/share/": "XDG_DATA_HOME", ".local/state/": "XDG_STATE_HOME",
    ".cache/": "XDG_CACHE_HOME",
}

# Variables that move a tool's credentials out of the default place: variable -> what under it is secret
# ("" the path the variable names itself; a list variable such as KUBECONFIG is split on ':').
SECRET_PATH_VARIABLES: dict[str, tuple[str, ...]] = {
    "CARGO_HOME": ("credentials.toml", "credentials"),
    "DOCKER_CONFIG": ("",), "REGISTRY_AUTH_FILE": ("",), "KUBECONFIG": ("",),
    "AWS_SHARED_CREDENTIALS_FILE": ("",), "AWS_CONFIG_FILE": ("",), "GOOGLE_APPLICATION_CREDENTIALS": ("",),
    "CLOUDSDK_CONFIG": ("",), "AZURE_CONFIG_DIR": ("",),
    "GNUPGHOME": ("",), "PASSWORD_STORE_DIR": ("",), "NETRC": ("",),
    "HF_HOME": ("token", "stored_tokens"), "HF_TOKEN_PATH": ("",),
    "NPM_CONFIG_USERCONFIG": ("",), "PIP_CONFIG_FILE": ("",), "POETRY_CONFIG_DIR": ("auth.toml",),
    "GRADLE_USER_HOME": ("gradle.properties",), "TF_CLI_CONFIG_FILE": ("",), "RCLONE_CONFIG": ("",),
    "GH_CONFIG_DIR": ("",), "CODEX_HOME": ("auth.json",), "CLAUDE_CONFIG_DIR": (".credentials.json",),
    "HISTFILE": ("",), "TRELLIS_STATE_DIR": ("",),
    "KAGGLE_CONFIG_DIR": ("kaggle.json",), "PULUMI_HOME": ("credentials.json",), "DATABRICKS_CONFIG_FILE": ("",),
    "SOPS_AGE_KEY_FILE": ("",), "NGROK_CONFIG": ("",), "SNOWFLAKE_HOME": ("connections.toml", "config.toml"),
    "DBT_PROFILES_DIR": ("profiles.yml",),
}


def homes(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``$HOME`` and the passwd home of this process's user (one entry when they agree); absolute ones only."""
    env = os.environ if environ is None else environ
    found = [env.get("HOME", "")]
    try:
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:  # a uid without a passwd entry (containers): $HOME is all there is
        pass
    return tuple(dict.fromkeys(os.path.realpath(h) for h in found if h and os.path.isabs(h)))


def secret_paths(environ: Mapping[str, str] | None = None, home_dirs: Iterable[str] | None = None) -> list[str]:
    """Every place a listed credential may live, whether it exists or not (absolute, deduplicated)."""
    env = os.environ if environ is None else environ
    out: list[str] = []
    for home in homes(env) if home_dirs is None else home_dirs:
        out += [os.path.join(home, name) for name in HOME_SECRETS]
    # every command's start comes here: each variable is read once, not once a name
    bases = {prefix: base for prefix, variable in XDG_PREFIXES.items() if os.path.isabs(base := env.get(variable, ""))}
    for name in HOME_SECRETS:
        for prefix, base in bases.items():
            if name.startswith(prefix):
                out.append(os.path.join(base, name.removeprefix(prefix)))
    for variable, inside in SECRET_PATH_VARIABLES.items():
        for value in env.get(variable, "").split(":"):
            if os.path.isabs(value):
                out += [os.path.join(value, part) if part else value for part in inside]
    return list(dict.fromkeys(os.path.normpath(p) for p in out))


# Files of the system only root may read: hidden from the commands of a daemon run as root. Such a daemon runs
# its commands as uid 0 with no capability, and uid 0 still owns these files (mode 0600/0640, owner root): the
# read needs no CAP_DAC_OVERRIDE. A daemon run as any other user cannot read them anyway. A directory hides
# everything in it; /etc/ssh's host keys are matched by name (SSH_HOST_KEYS), the public halves stay.
SYSTEM_SECRETS: tuple[str, ...] = (
    # --- accounts: password hashes
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd",
    # --- private keys of the host's services
    "/etc/ssl/private", "/etc/pki/tls/private", "/etc/letsencrypt/archive", "/etc/letsencrypt/live",
    "/etc/letsencrypt/keys", "/etc/letsencrypt/accounts", "/etc/krb5.keytab",
    # --- networks and VPNs: Wi-Fi passwords, tunnel keys, node identities
    "/etc/NetworkManager/system-connections", "/etc/wireguard", "/etc/openvpn", "/etc/ipsec.secrets",
    "/etc/ipsec.d/private", "/etc/ppp/chap-secrets", "/etc/ppp/pap-secrets", "/var/lib/tailscale",
    "/var/lib/zerotier-one/identity.secret", "/var/lib/iwd",
    # --- clusters and databases: admin kubeconfigs, join tokens, maintenance passwords
    "/etc/kubernetes/admin.conf", "/etc/kubernetes/super-admin.conf", "/etc/kubernetes/pki",
    "/etc/rancher/k3s/k3s.yaml", "/etc/rancher/rke2/rke2.yaml", "/var/lib/rancher/k3s/server/token",
    "/var/lib/rancher/k3s/server/tls", "/etc/mysql/debian.cnf",
    # --- credentials systemd and sudo keep
    "/etc/credstore", "/etc/credstore.encrypted", "/var/lib/systemd/credential.secret", "/var/lib/sudo",
)
SSH_HOST_KEYS = "/etc/ssh"  # ssh_host_*_key: the host's private keys (a leak lets one impersonate the host)


def system_secret_paths() -> list[str]:
    """The :data:`SYSTEM_SECRETS` that exist now, with the SSH host's private keys; empty unless this process
    runs as root (no other user can read them)."""
    if os.geteuid() != 0:
        return []
    found = [p for p in SYSTEM_SECRETS if os.path.lexists(p)]
    try:
        names = sorted(os.listdir(SSH_HOST_KEYS))
    except OSError:
        names = []
    found += [os.path.join(SSH_HOST_KEYS, n) for n in names if n.startswith("ssh_host_") and n.endswith("_key")]
    return found
