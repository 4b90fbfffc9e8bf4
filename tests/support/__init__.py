"""Helpers shared by the tests: plain functions, classes and constants.

Fixtures shared across test folders live in tests/support/fixtures/ and are registered
once, through ``pytest_plugins`` in tests/conftest.py: a test asks for them by name and
never imports them. Tests import helpers from here, never from a conftest or another
test module.
"""
