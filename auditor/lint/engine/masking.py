"""Masking of secrets in everything the lint engine prints, stores or raises.

Which keys are secret is the probes' rule (auditor.probes.config, the project's one
list): keys are compared with '-' and '_' read as '.', so Spring's
`ssl.key-store-password` and `sasl_jaas_config` are caught too. On top of it, the user
info of any URL inside a value (`user:password@`, or a bare token) is hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.lib.secrets import ENV_REF, MASK, mask_text
from auditor.probes.config import is_secret_key

__all__ = ["MASK", "is_secret_key", "mask_config", "mask_text", "mask_value"]


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
