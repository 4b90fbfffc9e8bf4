"""The rules, one module per target: each check declared with its rule's metadata above it."""
