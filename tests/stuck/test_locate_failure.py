"""What a failed Spark locate job's output leaves in the diagnosis: no secret (pure)."""

from __future__ import annotations

from auditor.stuck.locate import failure_tail

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="auditor" password="pw-9f3"'


def test_a_failed_locate_hides_a_password_its_output_quotes_from_the_jaas_line() -> None:
    output = "\n".join(
        [
            "Exception in thread main org.apache.kafka.common.KafkaException: Failed to construct kafka consumer",
            'Caused by: java.lang.IllegalArgumentException: bad value password="pw-9f3"; for sasl',
            "see postgresql://app:db-secret@127.0.0.1:5432/app",
        ]
    )
    tail = failure_tail(output, {"sasl.jaas.config": JAAS, "sasl.password": "pw-9f3", "group.id": "g"})
    assert "pw-9f3" not in tail and "db-secret" not in tail
    assert "Failed to construct kafka consumer" in tail and "IllegalArgumentException" in tail


def test_a_failed_locate_hides_a_secret_settings_whole_value_and_keeps_the_last_five_lines() -> None:
    output = "\n".join([f"line {n}" for n in range(10)] + [f"config {JAAS}"])
    tail = failure_tail(output, {"sasl.jaas.config": JAAS})
    assert JAAS not in tail and "pw-9f3" not in tail
    assert tail.startswith("line 6 | line 7") and tail.count(" | ") == 4
