"""The demo ticket pipeline (the user's story: tickets stuck in NEW).

A producer service inserts tickets (status NEW) into a source-of-truth table and
produces them with AuditedProducer; a consumer service processes them with
AuditedConsumer and sets status DONE, under a selectable delivery mode and fault
switches, so the auditor has a real pipeline with real problems to audit.

The core (options, store, producer, consumer, service) imports nothing from
Django; only apps.py and cli.py belong to the Django side.
"""
