"""The canary: synthetic records on every partition of a canary topic, measuring loss,
duplicates, reordering and end-to-end latency per partition and per leader broker."""
