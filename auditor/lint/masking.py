"""Masking of secrets in everything the lint engine prints, stores or raises.

Builds on auditor.lib.secrets (the probes' rule) and widens it for pasted configs:
keys are compared with '-' and '_' read as '.', so Spring's `ssl.key-store-password`
and `sasl_jaas_config` are caught too, and basic-auth user info (`user:password`,
whether in a `*.user.info` key or inside a URL) is hidden.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from auditor.lib.secrets import ENV_REF, MASK, SECRET_KEY_PARTS

_EXTRA_SECRET_KEY_PARTS = ("user.info", "userinfo", "credentials", "private.key", "api.key", "apikey")
# scheme://user:password@host or scheme://token@host
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def _normalise_key(key: str) -> str:
    return re.sub(r"[-_]", ".", key.lower())


def is_secret_key(key: str) -> bool:
    """True for a config key whose value is a credential."""
    normalised = _normalise_key(str(key))
    return any(part in normalised for part in SECRET_KEY_PARTS + _EXTRA_SECRET_KEY_PARTS)


def mask_text(text: str) -> str:
    """Hide the user info of any URL inside ``text`` (user:password@ → ****@)."""
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def mask_value(key: str, value: Any) -> Any:
    """The value as it may be shown: secrets become ****, ${ENV} references stay visible."""
    if value is None:
        return None
    if is_secret_key(key):
        if isinstance(value, str) and ENV_REF.fullmatch(value.strip()):
            return value
        return MASK
    if isinstance(value, str):
        return mask_text(value)
    return value


def mask_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of a config with every secret masked."""
    return {str(key): mask_value(str(key), value) for key, value in config.items()}
