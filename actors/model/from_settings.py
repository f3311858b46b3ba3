"""The primary model a daemon runs, built from the settings' ``model`` object.

One path for both ways a daemon starts: :func:`actors.open_daemon` given no ``model=``, and
``trellis serve`` (``transport.bootstrap.make_model``, which adds its flags as :class:`Overrides`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from ..hosts import is_loopback_host
from ..settings import Settings, SettingsError
from .base import ModelProvider
from .scripted import ScriptedModel

log = logging.getLogger(__name__)

PROVIDERS = ("scripted", "openai")


@attrs.frozen(kw_only=True)
class Overrides:
    """What a command line sets over the settings and the environment, and how its errors name it.

    ``openai`` holds :class:`~actors.model.openai.OpenAIConfig` fields by name (None: not given); ``names``
    the options errors cite for ``provider``, ``base_url`` and ``model`` (e.g. ``--openai-base-url``).
    """

    provider: str | None = None
    openai: Mapping[str, Any] = attrs.field(factory=dict)
    names: Mapping[str, str] = attrs.field(factory=dict)


def provider_from_settings(settings: Settings, environ: Mapping[str, str] | None = None, *,
                           overrides: Overrides | None = None,
                           warn: Callable[[str], None] | None = None) -> ModelProvider:
    """The model ``settings.model`` names: the scripted demo model unless its ``provider`` is ``"openai"``.

    The ``openai`` provider is configured as the daemon configures it: ``environ`` (default ``os.environ``:
    ``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY``), then the settings (``baseUrl``, ``name``,
    ``apiKey``, ...), which win; it needs a base URL and a model name from one of them. ``overrides``: a
    command line's, which win over both. Raises :class:`SettingsError` for a model that cannot run, never
    showing the key or the URL. ``warn`` (default: the log) gets what may still be wrong, e.g. no API key for
    a server off loopback.
    """
    overrides = overrides or Overrides()
    environ = os.environ if environ is None else environ
    warn = warn or log.warning
    provider = overrides.provider or settings.model.get("provider", "scripted")
    where = settings.path or "settings"
    if provider not in PROVIDERS:
        raise SettingsError(f"{where}: model.provider must be 'scripted' or 'openai'")
    if provider == "scripted":
        return ScriptedModel()
    from .openai import OpenAIConfig, OpenAIModel  # its HTTP client is loaded only when it is used

    try:
        config = OpenAIConfig.from_sources(environ, settings.model, **overrides.openai)
    except ValueError as exc:
        raise SettingsError(f"{where}: {exc}") from None
    # The file to name when what is missing was the settings' to say (not a flag's).
    source = "" if overrides.provider else (settings.path or "")
    for line in _check_openai(settings.model, environ, overrides, config.api_key, source):
        warn(line)
    return OpenAIModel(config)


def _given(overrides: Overrides, settings: Mapping[str, Any], field: str, key: str, environ: Mapping[str, str],
           var: str) -> tuple[str, str] | None:
    """(the value, where it came from) by the precedence of ``OpenAIConfig.from_sources``; ``None`` if unset."""
    if overrides.openai.get(field):
        return overrides.openai[field], overrides.names.get(field, field)
    if isinstance(settings.get(key), str) and settings[key]:
        return settings[key], f"settings model.{key}"
    if environ.get(var):
        return environ[var], f"${var}"
    return None


def _check_openai(settings: Mapping[str, Any], environ: Mapping[str, str], overrides: Overrides,
                  api_key: str | None, source: str = "") -> list[str]:
    """What the ``openai`` model needs to start: a base URL and a model name (``SettingsError`` naming the
    missing setting); returns warnings (no API key for a server off loopback)."""
    # OpenAIConfig has defaults for both (OpenAI's own service), but running them unasked would send the
    # prompts somewhere the user never named.
    if overrides.provider == "openai":
        which = f"{overrides.names.get('provider', 'provider')} openai"
    else:
        which = 'settings model.provider "openai"'
    base = _given(overrides, settings, "base_url", "baseUrl", environ, "OPENAI_BASE_URL")
    name = _given(overrides, settings, "model", "name", environ, "OPENAI_MODEL")
    missing = []
    if base is None:
        flag = f"{overrides.names['base_url']} URL, " if "base_url" in overrides.names else ""
        missing.append(f"a base URL: {flag}$OPENAI_BASE_URL or settings model.baseUrl "
                       "(e.g. http://127.0.0.1:8080/v1)")
    if name is None:
        flag = f"{overrides.names['model']} NAME, " if "model" in overrides.names else ""
        missing.append(f"a model name: {flag}$OPENAI_MODEL or settings model.name "
                       "(the name the server serves, e.g. qwen3)")
    if missing:
        raise SettingsError(f"{which} needs " + "; and ".join(missing), source=source)
    assert base is not None
    url, given = base
    try:
        parts = urlsplit(url)
        host = parts.hostname  # parsed here: an unclosed "[" raises
    except ValueError:
        parts, host = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        # Not echoed: a URL may carry credentials (user:password@host).
        raise SettingsError(f"{which}: the base URL ({given}) must be an http:// or https:// URL with a host "
                            "(e.g. http://127.0.0.1:8080/v1)", source=source)
    if not api_key and not is_loopback_host(host):
        return [f"no API key for the model server at {host}: requests go without Authorization "
                "(set $OPENAI_API_KEY or settings model.apiKey if it wants one)"]
    return []
