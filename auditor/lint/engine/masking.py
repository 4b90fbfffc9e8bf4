"""Masking of secrets in everything the lint engine prints, stores or raises.

Which keys are secret is the probes' rule (auditor.probes.config, the project's one
list): keys are compared with '-' and '_' read as '.', so Spring's
`ssl.key-store-password` and `sasl_jaas_config` are caught too. On top of it, the user
info of any URL inside a value (`user:password@`, or a bare token) is hidden, and so is
everything after a secret key written inside a value: a .properties line ending in a
backslash joins the next line, key and all, to its value (`linger.ms=5 \\` then
`ssl.key.password=pw` reads as linger.ms = `5 ssl.key.password=pw`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from auditor.lib.secrets import ENV_REF, MASK, mask_text
from auditor.probes.config import is_secret_key

__all__ = ["MASK", "is_secret_key", "mask_config", "mask_embedded_secrets", "mask_text", "mask_value"]

# a key inside a value: a run of characters up to a .properties separator ('=', ':' or blank)
_EMBEDDED_KEY = re.compile(r"[^\s=:]+")
_SEPARATOR = re.compile(r"\s*[=:]?\s*")


def mask_embedded_secrets(text: str) -> str:
    """``text`` with everything after the first secret key it holds (followed by a value) masked:
    `5 basic.auth.user.info=svc:pw` -> `5 basic.auth.user.info=****`. The rest of the text is
    masked, not one token: a .properties value runs to the end of its line, blanks and all."""
    for match in _EMBEDDED_KEY.finditer(text):
        if not is_secret_key(match.group()):
            continue
        separator = _SEPARATOR.match(text, match.end())
        after = separator.end() if separator else match.end()
        if text[after:].strip() and after > match.end():
            return f"{text[:after]}{MASK}"
    return text


def mask_value(key: str, value: Any) -> Any:
    """The value as it may be shown: secrets become ****, ${ENV} references stay visible."""
    if value is None:
        return None
    if is_secret_key(key):
        if isinstance(value, str) and ENV_REF.fullmatch(value.strip()):
            return value
        return MASK
    if isinstance(value, str):
        return mask_text(mask_embedded_secrets(value))
    return value


def mask_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of a config with every secret masked."""
    return {str(key): mask_value(str(key), value) for key, value in config.items()}
