"""One scenario's world: its topic, source table, binding, stuck rule and consumer group.

The world also runs the auditor the way its users do: a reconciliation through the run
service (`audit reconcile BINDING`: spark-submit, or in this process with --in-process) and
a stuck diagnosis through `run_diagnosis` (`audit stuck RULE`). What the auditor said is
read back from what it stored (findings, stuck items), as the dashboard shows it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from confluent_kafka.admin import AdminClient
from django.conf import settings

from auditor.lab.cluster import Cluster, LabError
from auditor.lint.engine.errors import LintInputError
from auditor.lint.live import lint_live_cluster
from auditor.lint.observed import consumer_lag
from auditor.lint.service import lint_pasted
from auditor.pipelines.models import Binding, SourceDatabase, StuckRule
from auditor.pipelines.models import Cluster as ClusterModel
from auditor.probes import ensure_audit_topics
from auditor.reconcile import conf as reconcile_conf
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.reconcile.service import execute_run, start_run
from auditor.stuck.models import DiagnosisRun, StuckItem
from auditor.stuck.service import DiagnosisOptions, run_diagnosis

Verdicts = dict[str, set[str]]  # key → the verdicts it has ("missing/broker-lost", "stuck:skipped", …)
STUCK_PREFIX = "stuck:"
# Rows of scenarios with a stuck rule are created this long ago: older than the rule's
# threshold (make_rule), so "stuck" in the truth and in the rule mean the same rows.
STUCK_AGE_S = 60
# World.reconcile(judged=True): how often a held run is made again, and for how long at most
# (a ledger change a binding's first run could not date holds rows created up to about 7 minutes
# after that run).
HELD_POLL_S = 30.0
HELD_WAIT_S = 1500.0
# World.stuck(judged=True) waits at most this long for consumer sessions' processing holds
# (max.poll.interval.ms, 300 s by default, after each one's commit) to pass
PROCESSING_WAIT_S = 660.0


@dataclass
class Options:
    in_process: bool = False  # reconciliation in this process's SparkSession (tests) or spark-submit
    keep: bool = False
    spark: object = None  # a SparkSession for in-process stuck diagnosis (tests)


@dataclass
class AuditorAnswer:
    verdicts: Verdicts
    finished_monotonic: float
    detail: dict[str, object] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # stuck items: key → the verdict's reason
    # stuck items a consumer session may still be processing: key → the instant its hold ends
    processing_until: dict[str, str] = field(default_factory=dict)


# The stack's SASL_SSL listener (SCRAM-SHA-512 over TLS) as a user declares a secured cluster:
# ${ENV} references that stack.sh's environment resolves (the secured-cluster tests use it too).
# A secured scenario's own clients keep the plaintext listener: only the auditor's reads are secured.
SECURED_BOOTSTRAP = "${KAFKA_SECURE_BOOTSTRAP_SERVERS}"
SECURED_CONFIG = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.username": "${KAFKA_SASL_USERNAME}",
    "sasl.password": "${KAFKA_SASL_PASSWORD}",
    "ssl.ca.location": "${KAFKA_CA_LOCATION}",
}
SECURED_ENV = ("KAFKA_SECURE_BOOTSTRAP_SERVERS", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "KAFKA_CA_LOCATION")


class World:
    """Names are unique per scenario run, so scenarios never see each other's data."""

    def __init__(self, scenario: str, cluster: Cluster, options: Options) -> None:
        suffix = uuid.uuid4().hex[:6]
        slug = f"lab-{scenario}-{suffix}"
        self.scenario = scenario
        self.cluster = cluster
        self.options = options
        self.topic = slug
        self.group = f"{slug}-app"
        self.table = f"public.lab_{scenario.replace('-', '_')}_{suffix}"
        self.name = slug
        self.source_url = os.environ.get("SOURCE_DATABASE_URL", "")
        if not self.source_url:
            raise LabError("SOURCE_DATABASE_URL is not set: the lab writes its ticket tables there")
        self.binding: Binding | None = None
        self.rule: StuckRule | None = None
        # the ledgers this world's probes write, when it has its own (make_ledgers): the
        # deployment's shared ones otherwise
        self.producer_ledger = f"{slug}.producer-ledger"
        self.consumer_ledger = f"{slug}.consumer-ledger"
        self.ledgers_made = False
        self.topic_made = False
        self.table_made = False
        self.notes: list[str] = []
        self.running: list[subprocess.Popen[str]] = []

    # --- setup -----------------------------------------------------------------------------
    def make_topic(self, partitions: int = 1, replication: int = 3, **config: str) -> str:
        self.cluster.create_topic(
            self.topic, partitions, replication, {k.replace("_", "."): v for k, v in config.items()}
        )
        self.topic_made = True
        return self.topic

    def make_ledgers(self, partitions: int = 1) -> tuple[str, str]:
        """Ledger topics of this world's own (as ensure_audit_topics makes them: 3 replicas,
        min.insync.replicas 2), which its binding names and its probes write (--probed
        consumers; a producer given ledger_topic=world.producer_ledger): a fault may delete
        their records without touching another scenario's. Call before make_binding."""
        ensure_audit_topics(
            {"bootstrap.servers": self.cluster.bootstrap}, (self.producer_ledger, self.consumer_ledger), partitions
        )
        self.ledgers_made = True
        return self.producer_ledger, self.consumer_ledger

    def make_table(self) -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            conn.execute(
                f"CREATE TABLE {self.table} (id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'NEW', "
                "created_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute(
                f"CREATE TABLE {self.table}_processed (id bigint NOT NULL, session text NOT NULL, "
                "updated boolean NOT NULL, at timestamptz NOT NULL DEFAULT now())"
            )
        self.table_made = True

    def insert(self, ids: list[int], age_s: float = 0) -> None:
        """Ticket rows, status NEW, created `age_s` seconds ago."""
        with psycopg.connect(self.source_url, autocommit=True) as conn, conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.table} (id, created_at) VALUES (%s, now() - make_interval(secs => %s))",
                [(i, age_s) for i in ids],
            )

    def delete(self, ids: list[int]) -> None:
        """The application deletes ticket rows."""
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {self.table} WHERE id = ANY(%s)", (ids,))

    def set_status(self, ids: list[int], status: str = "DONE") -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            conn.execute(f"UPDATE {self.table} SET status = %s WHERE id = ANY(%s)", (status, ids))

    def rows(self) -> dict[int, str]:
        """Ground truth from the database: id → status."""
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            return dict(conn.execute(f"SELECT id, status FROM {self.table}").fetchall())

    def processed(self) -> dict[int, int]:
        """Ground truth from the application's own log: id → times processed."""
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            return dict(conn.execute(f"SELECT id, count(*) FROM {self.table}_processed GROUP BY id").fetchall())

    def processed_not_updated(self) -> set[int]:
        """Ground truth: ids the application processed whose row update was lost."""
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            rows = conn.execute(f"SELECT DISTINCT id FROM {self.table}_processed WHERE NOT updated").fetchall()
        return {row[0] for row in rows}

    def run_worker(self, command: str, *args: str, timeout_s: float = 120) -> int:
        """`python -m auditor.lab.workload COMMAND ARGS` as its own process; its exit status."""
        done = subprocess.run(
            [sys.executable, "-m", "auditor.lab.workload", command, *args],
            env={**os.environ, "LAB_SOURCE_URL": self.source_url},
            cwd=str(settings.BASE_DIR),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode not in (0, -signal.SIGKILL):
            raise LabError(f"the lab's {command} worker exited with {done.returncode}: {done.stderr.strip()[-1500:]}")
        return done.returncode

    def start_consumer(self, mode: str, *, probed: bool = False, **extra: object) -> subprocess.Popen[str]:
        """The ticket consumer left running (an application that stays up); stop_consumers ends it."""
        args = [
            sys.executable, "-m", "auditor.lab.workload", "consume",
            "--bootstrap", self.cluster.bootstrap, "--topic", self.topic, "--group", self.group,
            "--table", self.table, "--mode", mode, "--idle-s", "600",
        ]  # fmt: skip
        args += self._probe_args(probed)
        for name, value in extra.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        process = subprocess.Popen(
            args,
            env={**os.environ, "LAB_SOURCE_URL": self.source_url},
            cwd=str(settings.BASE_DIR),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.running.append(process)
        return process

    def _probe_args(self, probed: bool) -> list[str]:
        if not probed:
            return []
        return ["--probed", "--consumer-ledger", self.consumer_ledger] if self.ledgers_made else ["--probed"]

    def expected_group_risks(self) -> Verdicts:
        """The truth about the group as the lab knows it: none of its consumer processes is running.
        Where it has committed offsets, they expire offsets.retention.minutes from now; where a
        partition holds records and it has committed nothing, its next consumer starts there from
        auto.offset.reset (no-committed-offset). Where the log start has passed an offset it
        committed, records were deleted before it committed them (retention-lag). Read before the
        diagnosis: with no consumer running the committed offsets stay, and a log start only
        grows, so what holds now holds when the auditor looks (records a producer appends later
        only add partitions that hold records, which the lab's scenarios do not do)."""
        if any(p.poll() is None for p in self.running):
            return {}
        marks = self.cluster.watermarks(self.topic)
        committed = self.cluster.committed(self.group, self.topic, partitions=len(marks))
        risks = set()
        if committed:
            risks.add("risk:offsets-expiry")
        if any(p not in committed and high > low for p, (low, high) in marks.items()):
            risks.add("risk:no-committed-offset")
        if any(offset < marks[p][0] for p, offset in committed.items()):
            risks.add("risk:retention-lag")
        return {f"risk {self.group}": risks} if risks else {}

    def stop_consumers(self) -> None:
        for process in self.running:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
        self.running.clear()

    def consume(self, mode: str, *, crash_at: int = 0, probed: bool = False, **extra: object) -> int:
        """Run the ticket consumer as its own process (auditor/lab/workload.py); its exit status
        (-9 when it crashed on purpose)."""
        args = [
            sys.executable,
            "-m",
            "auditor.lab.workload",
            "consume",
            "--bootstrap",
            self.cluster.bootstrap,
            "--topic",
            self.topic,
            "--group",
            self.group,
            "--table",
            self.table,
            "--mode",
            mode,
            "--crash-at",
            str(crash_at),
        ]
        args += self._probe_args(probed)
        for name, value in extra.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        done = subprocess.run(
            args,
            env={**os.environ, "LAB_SOURCE_URL": self.source_url},
            cwd=str(settings.BASE_DIR),
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode not in (0, -signal.SIGKILL):
            raise LabError(f"the ticket consumer exited with {done.returncode}: {done.stderr.strip()[-1500:]}")
        return done.returncode

    def make_binding(
        self,
        groups: list[str] | None = None,
        guarantee: str = "at-least-once",
        grace_s: int = 1,
        record_key: str = "key",
        secured: bool = False,
    ) -> Binding:
        """secured: the auditor reads the cluster through its SASL_SSL listener."""
        defaults: dict[str, object] = {"bootstrap_servers": self.cluster.bootstrap}
        if secured:
            missing = [name for name in SECURED_ENV if not os.environ.get(name)]
            if missing:
                raise LabError(
                    f"the stack's SASL_SSL listener is not configured ({', '.join(missing)} unset): "
                    "start the stack with stack/stack.sh up, which writes them to .env"
                )
            defaults = {"bootstrap_servers": SECURED_BOOTSTRAP, "config": dict(SECURED_CONFIG)}
        cluster, _ = ClusterModel.objects.get_or_create(name=self.name, defaults=defaults)
        source, _ = SourceDatabase.objects.get_or_create(name=self.name, defaults={"url": "${SOURCE_DATABASE_URL}"})
        self.binding = Binding.objects.create(
            name=self.name,
            cluster=cluster,
            topic=self.topic,
            source=source,
            table=self.table,
            key_column="id",
            record_key=record_key,
            created_column="created_at",
            grace_seconds=grace_s,
            guarantee=guarantee,
            consumer_groups=groups or [],
            schedule_seconds=3600,
            producer_ledger_topic=self.producer_ledger if self.ledgers_made else "",
            consumer_ledger_topic=self.consumer_ledger if self.ledgers_made else "",
        )
        return self.binding

    def make_rule(self, older_than_s: int = 1) -> StuckRule:
        binding = self.binding or self.make_binding()
        self.rule = StuckRule.objects.create(
            name=self.name,
            binding=binding,
            status_column="status",
            stuck_values=["NEW"],
            age_column="created_at",
            older_than_seconds=older_than_s,
            schedule_seconds=3600,
        )
        return self.rule

    # --- the auditor -----------------------------------------------------------------------
    def reconcile(self, full: bool = False, judged: bool = False) -> AuditorAnswer:
        """One reconciliation run, as `audit reconcile BINDING` runs it; its findings by key.

        judged: the scenario's last look, whose truth is the final verdicts. A run that holds
        rows past the grace after a leader change (its `late` count: a failover may still hold
        their sends, failover_hold) rightly leaves them to a later run, so runs follow, a
        HELD_POLL_S apart, until none is held (at most HELD_WAIT_S), and the last one answers.
        So do runs that leave records unjudged because a probed consumer session committed past
        them within its processing bound (its window's `processing_until`: it may still be
        processing them), one once that time has passed.
        An earlier scenario's broker faults (within about 21 minutes) leave one at a binding's
        first run: the shared producer ledger's leaders cannot be dated, and count as changed
        at that run."""
        run = first = self._reconcile_run(full)
        started = time.monotonic()
        held_late = processing = False
        while judged and ((late := (run.counts or {}).get("late")) or (until := _run_processing_until(run))):
            if time.monotonic() - started > HELD_WAIT_S:
                raise LabError(
                    f"reconciliation run #{run.pk} still holds rows after {HELD_WAIT_S} s (late rows: {late or 0}; "
                    f"records committed past within a session's processing bound: {run.window.get('processing_until')})"
                )
            if late:
                held_late = True
                time.sleep(HELD_POLL_S)
            else:
                processing = True
                time.sleep(max(0.0, (until or 0.0) - time.time() + 2.0))
            run = self._reconcile_run(full)
        if run is not first:
            why = []
            if held_late:
                why.append(f"held {first.counts.get('late', 0)} row(s) after a leader change")
            if processing:
                why.append("left records committed past within a consumer session's processing bound unjudged")
            self.notes.append(
                f"run #{first.pk} {' and '.join(why)}; run #{run.pk}, {time.monotonic() - started:.0f} s later, "
                "held none and answers"
            )
        verdicts: Verdicts = {}
        for finding in Finding.objects.filter(run=run):
            key = finding.key if finding.key is not None else f"(seq {finding.seq})"
            verdicts.setdefault(key, set()).add(finding.kind + (f"/{finding.cause}" if finding.cause else ""))
        return AuditorAnswer(
            verdicts,
            time.monotonic(),
            {"run": run.pk, "mode": run.mode, "warnings": run.warnings, "records_read": run.records_read},
        )

    def _reconcile_run(self, full: bool) -> ReconcileRun:
        if self.binding is None:
            raise LabError("reconcile before make_binding")
        run = execute_run(
            start_run(self.binding, ReconcileRun.CLI, full=full),
            reconcile_conf.IN_PROCESS if self.options.in_process else reconcile_conf.SUBMIT,
        )
        if run.status != ReconcileRun.OK:
            raise LabError(f"reconciliation run #{run.pk} failed: {run.error}")
        return run

    def stuck(self, own_process: bool = False, judged: bool = True) -> AuditorAnswer:
        """One stuck diagnosis, as `audit stuck RULE` runs it; each open item's verdict by key.

        own_process: run that command as a process of its own, so that a crash of the Kafka
        client under a fault ends this scenario (an error naming the exit status), not the lab.
        judged (the default; False for a look in the middle of a fault): a look whose truth is
        the final verdicts. A record the last
        commit of a probed consumer session passed unprocessed is `unknown` until that
        session's max.poll.interval.ms has passed since the commit (it may still be processing
        it: verdict_outcomes.still_processing), so the diagnosis runs again once the latest
        such bound has passed (at most PROCESSING_WAIT_S), and that one answers."""
        first = self._stuck_once(own_process)
        if not judged:
            return first
        answer, started = first, time.monotonic()
        while (until := _processing_until(answer)) is not None:
            wait = until - time.time() + 2.0
            if time.monotonic() - started + max(wait, 0.0) > PROCESSING_WAIT_S:
                raise LabError(
                    f"the stuck diagnosis still takes a consumer session to be processing a record after "
                    f"{PROCESSING_WAIT_S} s ({answer.processing_until})"
                )
            time.sleep(max(wait, 0.0))
            answer = self._stuck_once(own_process)
        if answer is not first:
            self.notes.append(
                f"the stuck diagnosis took a consumer session to be still processing "
                f"{len(first.processing_until)} item(s); the one {time.monotonic() - started:.0f} s later "
                "answers"
            )
        return answer

    def _stuck_once(self, own_process: bool) -> AuditorAnswer:
        if self.rule is None:
            raise LabError("stuck before make_rule")
        if own_process:
            done = subprocess.run(
                # faulthandler: a crash inside a C extension still names the Python call it was in
                [sys.executable, "-X", "faulthandler", "manage.py", "audit", "stuck", self.rule.name],
                cwd=str(settings.BASE_DIR),
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                tail = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("%"))[-1500:]
                raise LabError(f"`audit stuck {self.rule.name}` exited with status {done.returncode}: {tail.strip()}")
            run = DiagnosisRun.objects.filter(rule=self.rule).latest("id")
        else:
            options = DiagnosisOptions(spark=self.options.spark) if self.options.spark is not None else None
            run = run_diagnosis(self.rule, DiagnosisRun.CLI, options=options)
        if run.status != DiagnosisRun.OK:
            raise LabError(f"stuck diagnosis of {self.rule.name} failed: {run.error}")
        items = StuckItem.objects.open().filter(rule=self.rule)
        verdicts: Verdicts = {}
        reasons: dict[str, str] = {}
        # Cluster-side risks count as verdicts on their subject (a group, a transaction): a risk
        # the truth does not support is a false alarm like any other.
        for risk in run.risks or []:
            verdicts.setdefault(f"risk {risk.get('subject')}", set()).add(f"risk:{risk.get('kind')}")
        # where a consumer session may still be processing the item's record (its hold's end)
        processing: dict[str, str] = {}
        for item in items:
            verdicts.setdefault(item.key, set()).add(STUCK_PREFIX + item.verdict)
            reasons[item.key] = item.reason
            held = [g["processing_until"] for g in (item.evidence or {}).get("groups", []) if g.get("processing_until")]
            if held:
                processing[item.key] = max(held)
        return AuditorAnswer(verdicts, time.monotonic(), {"notes": run.notes}, reasons, processing)

    def lint(self, **clients: dict[str, object]) -> AuditorAnswer:
        """Config lint at the binding's guarantee, as users run it: each client's config as pasted
        into `audit lint` (``producer=…``, ``consumer=…``: what the scenario's clients ran with) and
        the scenario's topic as the live cluster describes it. Errors only, one verdict per
        setting: ``lint:<setting>`` on ``lint producer`` / ``lint consumer`` / ``lint topic``.
        Warnings are advice (a default worth a look), not a claim that the guarantee can break,
        so they are not scored; the broker-wide settings belong to the stack, not the scenario."""
        if self.binding is None:
            raise LabError("lint before make_binding")
        guarantee = self.binding.guarantee
        verdicts: Verdicts = {}
        for kind, config in clients.items():
            text = "\n".join(f"{name}={_property(value)}" for name, value in config.items())
            try:
                results = lint_pasted(
                    text, fmt="properties", client="librdkafka", guarantee=guarantee, kind=kind
                ).results
            except LintInputError as exc:
                raise LabError(f"the lint refused the {kind} config: {exc}") from exc
            for scanned in results:
                if scanned.result.severity == "error":
                    verdicts.setdefault(f"lint {kind}", set()).add(f"lint:{scanned.result.config}")
        # the cluster as the binding declares it (its SASL_SSL listener in a secured scenario)
        connection = self.binding.cluster.client_config()
        admin = AdminClient(connection)
        # the binding's groups as the scan service measures them: their lag and whether the
        # log start has passed their committed offsets
        groups = {self.topic: self.binding.consumer_groups} if self.binding.consumer_groups else {}
        lag = consumer_lag(connection, admin.list_topics(timeout=15), groups)
        item_keys = {self.topic: self.binding.record_key} if self.binding.record_key != "key" else {}
        for result in lint_live_cluster(
            admin,
            guarantee,
            topics=[self.topic],
            consumer_lag_seconds=lag.seconds,
            overtaken=lag.overtaken,
            item_keys=item_keys,
        ):
            if result.target == "topic" and result.severity == "error":
                verdicts.setdefault("lint topic", set()).add(f"lint:{result.config}")
        return AuditorAnswer(verdicts, time.monotonic())

    # --- cleanup ---------------------------------------------------------------------------
    def cleanup(self) -> None:
        self.stop_consumers()
        if self.options.keep:
            return
        if self.topic_made:
            self.cluster.delete_topic(self.topic)
        if self.ledgers_made:
            self.cluster.delete_topic(self.producer_ledger)
            self.cluster.delete_topic(self.consumer_ledger)
        if self.table_made:
            with psycopg.connect(self.source_url, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {self.table}, {self.table}_processed")
        if self.binding is not None:
            Binding.objects.filter(pk=self.binding.pk).delete()
            ClusterModel.objects.filter(name=self.name).delete()
            SourceDatabase.objects.filter(name=self.name).delete()
            reconcile_conf.state_location().join(self.name).remove_tree()


def _processing_until(answer: AuditorAnswer) -> float | None:
    """The epoch second the latest processing hold of a stuck diagnosis's items ends, or None:
    no item is held."""
    held = answer.processing_until
    return max(datetime.fromisoformat(until).timestamp() for until in held.values()) if held else None


def _property(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _run_processing_until(run: ReconcileRun) -> float | None:
    """When (epoch seconds) the records a run left unjudged because a probed consumer session
    committed past them within its processing bound are judged by a later run; None: none."""
    until = (run.window or {}).get("processing_until")
    return datetime.fromisoformat(until).timestamp() if until else None
