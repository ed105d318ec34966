"""The Spark driver's class-data-sharing archive (JDK AppCDS): where it lives and the JVM option that maps it.

A driver JVM loads and verifies ~20,000 classes before its first job; with the archive it maps them from one file
instead. The archive is valid only for the JDK and the classpath it was made with, so its name carries a digest
of both: a new JDK or jar makes `make setup` build another (jobs/spark_cds_build.py), and until then the JVM
starts without one. A JVM given an archive that does not match its classpath ignores it (-Xshare:auto, the
default) and runs as without.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from switchyard.deploy.jars import spark_extra_jars
from switchyard.deploy.java import java_executable
from switchyard.deploy.paths import jar_dir
from switchyard.state_handoff import settings

ENV = "SWITCHYARD_SPARK_CDS"  # false (or 0) starts drivers without the archive
# What the archive's workload covers (jobs/spark_cds_build.py): a new one builds a new archive at the next setup.
WORKLOAD = 2


def archive_path() -> Path:
    """Where the archive for this JDK, this pyspark and these jars lives (it may not exist). Beside the jars:
    a test's SWITCHYARD_HOME links them, so its drivers find the one archive too."""
    import pyspark

    java = Path(java_executable()).resolve()
    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("*.jar")) + spark_extra_jars()
    key = [str(java), java.stat().st_mtime_ns, pyspark.__version__, [(str(j), j.stat().st_size) for j in jars],
           WORKLOAD]
    return jar_dir("cds") / f"spark-driver-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]}.jsa"


def driver_options() -> str:
    """The driver JVM's option that maps the archive, or "" when there is none (or SWITCHYARD_SPARK_CDS is false)."""
    if not settings.value(ENV):
        return ""
    path = archive_path()
    # quiet: a JVM that cannot map it (another classpath) says so on stdout, which is the command's output
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off,cds+dynamic=off" if path.exists() else ""
