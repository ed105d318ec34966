"""The local JVM jars fetched at setup (versions live in deploy/pom.xml), as Spark and the broker need them."""

from __future__ import annotations

import re
from pathlib import Path

from switchyard.deploy.paths import jar_dir
from switchyard.state_handoff.errors import UserError

_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")


def artifact_name(jar: Path) -> str:
    return _VERSION_SUFFIX.sub("", jar.name)


def fetched_jars(profile: str) -> list[Path]:
    jars = sorted(jar_dir(profile).glob("*.jar"))
    if not jars:
        raise UserError(f"no {profile} jars in {jar_dir(profile)}: run `make setup` first")
    return jars


def spark_extra_jars() -> list[Path]:
    """Delta, the Kafka connector and S3A, leaving out every artifact that pyspark/jars already ships."""
    import pyspark

    shipped = {artifact_name(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in fetched_jars("spark") + fetched_jars("s3a") if artifact_name(j) not in shipped]


def kafka_classpath() -> str:
    return ":".join(str(j) for j in fetched_jars("kafka"))


def objectstore_classpath() -> str:
    return ":".join(str(j) for j in fetched_jars("objectstore"))
