"""What a Spark job ships beside itself: the cached jars and the job's own Python package.

No pyspark import here: the auditor's web and worker processes build spark-submit command
lines from it.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_JARS_DIR = PACKAGE_DIR.parent / ".cache" / "spark" / "jars"


def local_jars(jars_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The jars Spark needs beyond PySpark (Kafka source, JDBC driver), cached by the stack.

    Nothing is downloaded at run time: a missing folder is an error naming it.
    """
    folder = Path(jars_dir or os.environ.get("SPARK_JARS_DIR") or DEFAULT_JARS_DIR)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(
            f"no Spark jars in {folder} (SPARK_JARS_DIR): run the stack bootstrap to cache "
            "spark-sql-kafka and the PostgreSQL JDBC driver"
        )
    return jars


def package_archive(folder: Path) -> Path:
    """spark_jobs as a zip for --py-files, so executors on other machines import the same code."""
    archive = folder / "spark_jobs.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for source in sorted(PACKAGE_DIR.glob("*.py")):
            zf.write(source, f"spark_jobs/{source.name}")
    return archive
