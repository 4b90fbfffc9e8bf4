"""The lint engine: plain Python, no Django (see README.md).

Callers import from the modules themselves (``auditor.lint.engine.linter.lint``): this
package re-exports nothing, so each name has one home.
"""
