"""Build the probes' native hot path (``_hotpath.c``) next to its source.

    python -m auditor.probes.build_native [--force]

The AuditedProducer works without it (a pure-Python produce() with the same steps); the
native one costs a fraction of the interpreter's time per record (benchmarks/probe_overhead.py).
It needs a C compiler and the Python headers (Debian: gcc, python3-dev). The build is
skipped when the module is newer than its source; a failure is reported, not fatal, and
the exit status says which happened (0 built or up to date, 1 not built).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "_hotpath.c"
MODULE = "_hotpath"


def target() -> Path:
    return HERE / f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def compile_command(output: Path) -> list[str] | str:
    """The compiler call, or why there is none."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return "no C compiler (cc or gcc) on PATH"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        return f"no Python.h in {include} (install the Python development headers: python3-dev)"
    return [*shlex.split(compiler), "-shared", "-fPIC", "-O2", "-Wall", "-Werror", f"-I{include}", str(SOURCE),
            "-o", str(output)]  # fmt: skip


def build(force: bool = False) -> tuple[bool, str]:
    output = target()
    if not force and output.exists() and output.stat().st_mtime >= SOURCE.stat().st_mtime:
        return True, f"{output.name} is up to date"
    command = compile_command(output)
    if isinstance(command, str):
        return False, command
    partial = output.with_suffix(".partial")
    command[-1] = str(partial)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        return False, f"{shlex.join(command)} failed:\n{done.stderr.strip()}"
    partial.replace(output)  # never a half-written module where Python imports it
    return True, f"built {output.name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    ok, message = build(args.force)
    print(message if ok else f"native hot path not built (the pure-Python one is used): {message}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
