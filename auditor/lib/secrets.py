"""Secrets: ${ENV} references and masking of anything that looks like a credential."""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import psycopg

# The probe library owns the list of secret keys (it must not import Django, so the
# dependency points this way): one list, one rule, for probes, pages and lint.
from auditor.probes.config import MASK, SECRET_KEY_MARKERS, is_secret_key

__all__ = [
    "ENV_REF",
    "MASK",
    "SECRET_KEY_MARKERS",
    "MaskedValueError",
    "MissingEnvError",
    "env_refs",
    "is_secret_key",
    "keep_stored_if_masked",
    "mask_db_error",
    "mask_mapping",
    "mask_text",
    "mask_url",
    "mask_webhook_text",
    "mask_webhook_url",
    "resolve_env",
]

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# scheme://user:password@host or scheme://token@host, anywhere in a text
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


class MissingEnvError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"environment variable {self.name} is not set"


def env_refs(text: str) -> list[str]:
    return ENV_REF.findall(text)


def resolve_env(text: str, environ: dict[str, str] | None = None) -> str:
    """Replace ${NAME} by the variable's value; a missing variable raises MissingEnvError."""
    env = os.environ if environ is None else environ

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise MissingEnvError(name)
        return env[name]

    return ENV_REF.sub(substitute, text)


def _mask_query(query: str) -> str:
    """?user=a&password=pw&sslmode=… → password=**** (libpq and JDBC take credentials there too)."""
    if not query:
        return query

    def masked(pair: str) -> str:
        key, sep, value = pair.partition("=")
        if sep and is_secret_key(key) and not ENV_REF.fullmatch(value):
            return f"{key}={MASK}"
        return pair

    return "&".join(masked(pair) for pair in query.split("&"))


def mask_url(url: str) -> str:
    """postgresql://user:pw@host/db?password=pw -> postgresql://user:****@host/db?password=****
    (${ENV} refs kept)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    parts = parts._replace(query=_mask_query(parts.query))
    if parts.password is None or ENV_REF.fullmatch(parts.password or ""):
        return urlunsplit(parts)
    netloc = parts.netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# password="pw" in a JAAS line, password=pw in a query string or a key=value dump
_PASSWORD_ASSIGNMENT = re.compile(r"""(?i)\b(\w*password)(\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&"')]+)""")


def mask_text(text: str) -> str:
    """Hide the user info of any URL inside ``text`` (user:password@ → ****@) and any
    password=… assignment (a JAAS line, a query string): for error messages and other free
    text that may quote a URL or a client setting."""
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _PASSWORD_ASSIGNMENT.sub(
        lambda m: m.group(0) if ENV_REF.fullmatch(m.group(3)) else f"{m.group(1)}{m.group(2)}{MASK}", text
    )


# what a libpq message quotes: for a URL it cannot parse, the token it stopped at
_QUOTED = re.compile(r'"[^"]*"')


def mask_db_error(exc: BaseException, url: str, whole: bool = False) -> str:
    """The first line of a database client's error (`whole`: all of it on one line), fit to
    store and show: mask_text, and the passwords of `url` (the resolved one the client was
    given: its user info and any secret query value) wherever the message quotes them.

    An error raised before any connection (psycopg's ProgrammingError: libpq could not parse
    the URL or an option in it) has every quoted token masked: libpq splits a URL its own way
    (a password holding ?, # or a second @ is cut elsewhere than Python cuts it), so what it
    quotes back may be a password, or part of one, that no parse here would find."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    text = mask_text(" ".join(str(exc).split()) if whole else lines[0])
    if isinstance(exc, psycopg.ProgrammingError):
        text = _QUOTED.sub(f'"{MASK}"', text)
    try:
        parts = urlsplit(url)
        secrets = [parts.password or ""]
        secrets += [value for key, value in parse_qsl(parts.query) if is_secret_key(key)]
    except ValueError:
        secrets = []
    for form in {form for secret in secrets for form in (secret, unquote(secret))} - {""}:
        text = text.replace(form, MASK)
    return text


def mask_webhook_url(url: str) -> str:
    """A webhook URL as anyone may see it: a ${ENV} reference as written; any other URL as
    scheme://host/**** (Slack's and most services' hook URLs carry their token in the path or
    the query; a URL that only takes its host from a reference is no different), user info
    masked."""
    if ENV_REF.fullmatch(url.strip()):
        return url
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return MASK
    if not parts.scheme or not host:
        return MASK
    rest = f"/{MASK}" if parts.path.strip("/") or parts.query or parts.fragment else parts.path
    userinfo = f"{MASK}@" if "@" in parts.netloc else ""
    return f"{parts.scheme}://{userinfo}{host}{rest}"


def mask_webhook_text(text: str, url: str) -> str:
    """``text`` (a receiver's reply, an error message) fit to show where mask_webhook_url
    hides ``url`` (the resolved one): the URL's target, path, query, each non-empty path
    segment and each query value, as sent or decoded, become ****; then mask_text. A receiver
    quoting the request back (Express's `Cannot POST /services/T0/B0/SECRET`) shows no token.
    A segment or value counts where it stands alone (a path segment `hook` leaves the word
    `webhook` whole); the whole path and target count anywhere."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return mask_text(text)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    whole = {url.strip(), target, parts.path, parts.query, parts.fragment}
    pieces = set(parts.path.split("/")) | {value for _, value in parse_qsl(parts.query, keep_blank_values=True)}
    forms = [(form, form in whole) for piece in whole | pieces for form in (piece, unquote(piece))]
    # longest first, so a segment never leaves part of the path around it behind
    for form, anywhere in sorted(set(forms), key=lambda item: len(item[0]), reverse=True):
        if form in ("", "/"):
            continue
        if anywhere:
            text = text.replace(form, MASK)
        else:
            text = re.sub(rf"(?<![\w.~%-]){re.escape(form)}(?![\w.~%-])", MASK, text)
    return mask_text(text)


def mask_mapping(config: dict[str, Any]) -> dict[str, Any]:
    """Copy of a client config with secret values masked (env references are kept visible)."""
    masked: dict[str, Any] = {}
    for key, value in config.items():
        if is_secret_key(str(key)) and not (isinstance(value, str) and ENV_REF.fullmatch(value)):
            masked[key] = MASK
        elif isinstance(value, str) and "://" in value:
            masked[key] = mask_url(value)
        else:
            masked[key] = value
    return masked


class MaskedValueError(ValueError):
    """A posted value that still carries a mask (****) but is not the value as shown: saved,
    the mask would replace the secret it hides."""


def keep_stored_if_masked(posted: Any, stored: Any, shown: Any) -> Any:
    """The value to save for ``posted``, from a form that showed ``shown`` (the mask of
    ``stored``; None when nothing is stored): posted back exactly as shown, the stored value;
    posted with no mask in it (or as stored), the posted value. A value that still holds the
    mask but was edited (a URL with only its host changed) raises MaskedValueError: the mask
    hides a secret the form never had, so it cannot be kept, and stored it would become the
    secret."""
    if shown is not None and posted == shown != stored:
        return stored
    if isinstance(posted, str) and MASK in posted and posted != stored:
        if shown is None:
            raise MaskedValueError(f"{MASK} is how a hidden secret is shown, not a value: type the secret")
        raise MaskedValueError(
            f"retype the secret: the value shown was masked ({MASK}), and an edited copy of it would store "
            f"{MASK} as the secret; post it exactly as shown to keep the stored one"
        )
    return posted
