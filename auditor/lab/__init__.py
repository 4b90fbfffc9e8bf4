"""The fault lab: real faults on the real stack, the real auditor, ground truth from the clients.

`audit lab [SCENARIO ...]` (auditor/lab/cli.py) runs scenarios (auditor/lab/scenarios/, one
module per family, listed in auditor/lab/registry.py). Each scenario builds its own topic,
source table, binding and consumer group (auditor/lab/world.py), runs a workload, injects a
fault with the stack's own commands (auditor/lab/cluster.py), runs the auditor through its
services, and compares every key's verdicts with what the clients and a plain read of the
topic observed (auditor/lab/compare.py). Results are stored (models.py) and shown at /lab/.
"""
