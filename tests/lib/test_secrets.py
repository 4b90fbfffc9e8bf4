"""One list of secret keys, read by the probes, the dashboard's helpers and the lint engine."""

from __future__ import annotations

import pytest

from auditor.lib import secrets as lib_secrets
from auditor.lint.engine import masking as lint_masking
from auditor.probes import config as probe_config

SECRET = "hunter2-Sup3rS3cret"

# Keys whose values are credentials in librdkafka, Java, Spring or schema-registry configs.
SECRET_KEYS = [
    "sasl.password",
    "SASL_PASSWORD",
    "sasl.jaas.config",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "ssl.key.password",
    "ssl.key-store-password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "basic.auth.user.info",
    "schema.registry.basic.auth.user.info",
    "basic_auth_user_info",
    "aws.credentials",
    "google.application.credential",
    "my.client_secret",
    "access.token",
    "custom.api.token",
    "api.key",
    "private.key",
]
ORDINARY_KEYS = ["acks", "bootstrap.servers", "sasl.username", "sasl.mechanism", "enable.idempotence"]


def test_it_keeps_a_single_list_owned_by_the_probe_library() -> None:
    assert lib_secrets.SECRET_KEY_MARKERS is probe_config.SECRET_KEY_MARKERS
    assert lib_secrets.is_secret_key is probe_config.is_secret_key
    assert lint_masking.is_secret_key is probe_config.is_secret_key
    assert not hasattr(lib_secrets, "SECRET_KEY_PARTS")


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_it_masks_a_secret_key_in_every_masking_helper(key: str) -> None:
    assert probe_config.mask_config({key: SECRET}) == {key: "****"}
    assert lib_secrets.mask_mapping({key: SECRET}) == {key: "****"}
    assert lint_masking.mask_config({key: SECRET}) == {key: "****"}


@pytest.mark.parametrize("key", ORDINARY_KEYS)
def test_it_leaves_ordinary_keys_visible_in_every_masking_helper(key: str) -> None:
    assert probe_config.mask_config({key: "plain"}) == {key: "plain"}
    assert lib_secrets.mask_mapping({key: "plain"}) == {key: "plain"}
    assert lint_masking.mask_config({key: "plain"}) == {key: "plain"}


def test_it_masks_the_password_of_a_url_and_keeps_env_references() -> None:
    assert lib_secrets.mask_url(f"redis://:{SECRET}@127.0.0.1:6379/0") == "redis://:****@127.0.0.1:6379/0"
    assert lib_secrets.mask_url(f"postgresql://app:{SECRET}@db/x") == "postgresql://app:****@db/x"
    assert lib_secrets.mask_url("postgresql://app:${DB_PASSWORD}@db/x") == "postgresql://app:${DB_PASSWORD}@db/x"
    assert lib_secrets.mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_it_masks_urls_quoted_in_free_text() -> None:
    text = f"Error connecting to redis://:{SECRET}@10.0.0.1:6379/0 and https://u:{SECRET}@h/x"
    masked = lib_secrets.mask_text(text)
    assert SECRET not in masked
    assert masked == "Error connecting to redis://****@10.0.0.1:6379/0 and https://****@h/x"


def test_it_masks_passwords_in_url_queries_and_jaas_lines() -> None:
    from auditor.lib.secrets import mask_text, mask_url

    assert (
        mask_url("postgresql://u:pw@h:5/db?sslmode=verify-full&sslpassword=kp&sslrootcert=/ca.pem")
        == "postgresql://u:****@h:5/db?sslmode=verify-full&sslpassword=****&sslrootcert=/ca.pem"
    )
    assert mask_url("postgresql://h/db?user=a&password=${DB_PW}") == "postgresql://h/db?user=a&password=${DB_PW}"
    jaas = 'ScramLoginModule required username="u" password="p w;x"; then'
    assert mask_text(jaas) == 'ScramLoginModule required username="u" password=****; then'
    assert mask_text("jdbc:postgresql://h/db?user=a&password=xyz&ssl=true") == (
        "jdbc:postgresql://h/db?user=a&password=****&ssl=true"
    )
    # the reason of a refusal stays readable
    assert mask_text('FATAL: password authentication failed for user "x"') == (
        'FATAL: password authentication failed for user "x"'
    )


def test_a_database_error_that_quotes_a_password_the_url_cannot_carry_is_masked() -> None:
    """libpq quotes the token of a URL it cannot parse: a resolved ${ENV} password with a stray
    % comes back whole, outside any user:password@ that mask_text could find (real psycopg;
    the URL is refused before any connection is tried)."""
    import psycopg

    for password in ("50%off", "p%40ss%"):
        url = f"postgresql://app:{password}@127.0.0.1:1/db"
        with pytest.raises(psycopg.Error) as caught:
            psycopg.connect(url, connect_timeout=1)
        assert password in str(caught.value)  # the client's own message quotes it
        masked = lib_secrets.mask_db_error(caught.value, url)
        assert password not in masked and "p@ss" not in masked
        assert masked == 'invalid percent-encoded token: "****"'
    # libpq cuts a URL elsewhere than Python does: a password with ?, # or a second @, or one
    # in the query string, comes back whole or in part, where no parse here finds it
    for url, secret in (
        ("postgresql://u:Sec?r%zzet@127.0.0.1:1/db", "Sec?r%zzet"),
        ("postgresql://u:Sec#r%zzet@127.0.0.1:1/db", "Sec#r%zzet"),
        ("postgresql://u@127.0.0.1:1/db?password=Sec%zzret", "Sec%zzret"),
        ("postgresql://u:Se%zz@cret@127.0.0.1:1/db", "Se%zz"),
        ("postgresql://u:a%zz/bcd@127.0.0.1:1/db", "a%zz"),
    ):
        with pytest.raises(psycopg.Error) as caught:
            psycopg.connect(url, connect_timeout=1)
        assert secret in str(caught.value), str(caught.value)
        assert secret not in lib_secrets.mask_db_error(caught.value, url, whole=True)


def test_a_literal_webhook_url_is_shown_without_its_path_and_query() -> None:
    shown = lib_secrets.mask_webhook_url
    assert shown("https://hooks.slack.com/services/T0/B0/XXXXSECRET") == "https://hooks.slack.com/****"
    assert shown("http://[::1]:9000/hook?sig=abc") == "http://[::1]:9000/****"
    assert shown("https://user:pw@alerts.example/") == "https://****@alerts.example/"
    assert shown("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert shown("${SLACK_HOOK_URL}") == "${SLACK_HOOK_URL}"  # the reference is no secret
    assert shown("https://${HOOK_HOST}/services/T0/B0/literaltoken") == "https://${HOOK_HOST}/****"
    assert shown("not a url") == "****"


def test_a_reply_quoting_a_webhook_urls_path_is_masked_and_other_words_kept() -> None:
    url = "https://hooks.example.com/services/T0/B0/XXXX%2BSECRET?token=Q1&x=1"
    reply = (
        "Cannot POST /services/T0/B0/XXXX%2BSECRET?token=Q1&x=1; token XXXX+SECRET, "
        "segment B0, value Q1; webhook services are down"
    )
    masked = lib_secrets.mask_webhook_text(reply, url)
    assert "SECRET" not in masked and "Q1" not in masked and " B0" not in masked
    assert masked.startswith("Cannot POST ****; token ****, segment ****, value ****")
    assert masked.endswith("webhook **** are down")  # a segment alone is masked, a word holding it is not
    assert lib_secrets.mask_webhook_text("refused: webhook host", "http://h/hook") == "refused: webhook host"
