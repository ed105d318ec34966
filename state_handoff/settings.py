"""Every `SWITCHYARD_*` setting in one table: its name, default, what it sets and whether it is a secret.

`get(name)` is how a module reads one: the environment's value, else the default declared here, so that each
default is written once. The modules check a value where they use it (their errors name the setting). This table
is also where a user finds them all, what `switchyard config` prints with the value in effect and where it came
from, and what docs/cli.md's settings table is made from. A test keeps it whole: a `SWITCHYARD_*` name read
anywhere in the code and missing here fails it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None  # as the user would write it; None: unset unless given
    meaning: str
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("SWITCHYARD_PIPELINE", None, "the pipeline `--pipeline` names when not given (the CLI and "
            "`python -m orchestration.run`, default `demo` there)"),
    Setting("SWITCHYARD_WAREHOUSE", "./warehouse", "the warehouse: a directory or an `s3a://` URL"),
    Setting("SWITCHYARD_BOOTSTRAP", "127.0.0.1:9092", "Kafka's bootstrap servers"),
    Setting("SWITCHYARD_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, for every "
            "Kafka client and Spark's Kafka source and sink"),
    Setting("SWITCHYARD_KAFKA_SASL_MECHANISM", None, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    Setting("SWITCHYARD_KAFKA_SASL_USERNAME", None, "the SASL user"),
    Setting("SWITCHYARD_KAFKA_SASL_PASSWORD", None, "the SASL password", secret=True),
    Setting("SWITCHYARD_KAFKA_SSL_CAFILE", None, "the CA certificate (PEM) that signs the brokers' certificates"),
    Setting("SWITCHYARD_KAFKA_SSL_CHECK_HOSTNAME", "true", "whether TLS checks the broker's host name"),
    Setting("SWITCHYARD_S3_ENDPOINT", None, "an S3-compatible store's endpoint (unset: AWS); keys from "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    Setting("SWITCHYARD_SPARK_MASTER", "local[*]", "Spark's master URL"),
    Setting("SWITCHYARD_SPARK_PROFILE", "default", "the Spark profile the CLI's jobs build (`default`, `test`)"),
    Setting("SWITCHYARD_ENV", "local", "the Dagster resources' environment (`local`, `test`: its Spark profile)"),
    Setting("SWITCHYARD_DRIVER_MEMORY", "2g", "the Spark driver's memory"),
    Setting("SWITCHYARD_DRIVER_HOST", "127.0.0.1", "the address executors reach the driver at"),
    Setting("SWITCHYARD_DRIVER_BIND_ADDRESS", None, "the address the driver binds (default: the driver host)"),
    Setting("SWITCHYARD_JVM_OPTIONS", None, "more options for the driver's and executors' JVMs"),
    Setting("SWITCHYARD_SPARK_CDS", None, "`0` starts drivers without the class-data archive setup made"),
    Setting("SWITCHYARD_SHUFFLE_PARTITIONS", None, "overrides the Spark profile's shuffle partitions"),
    Setting("SWITCHYARD_STATE_PARTITIONS", "2", "the stream's state-store partitions (fixed by a handoff's first "
            "checkpoint)"),
    Setting("SWITCHYARD_TIDY_EVERY", "100", "batches between two compactions and vacuums of a stream's tables"),
    Setting("SWITCHYARD_LEASE_SECONDS", "60", "how long a pipeline's lease lasts unrenewed (renewed every sixth)"),
    Setting("SWITCHYARD_MAX_RECORD_BYTES", "1048576", "records above this size are dead-lettered as `too_large`"),
    Setting("SWITCHYARD_FIRST_DAY", "2025-12-01", "the first day of the shipped code location's daily partitions"),
    Setting("SWITCHYARD_FAULT", None, "a crash point to die at, `point[:n]` (tests and drills only)"),
    Setting("SWITCHYARD_HOME", "./.switchyard", "fetched jars, the local servers' data and logs"),
    Setting("SWITCHYARD_POM", "deploy/pom.xml", "the Maven project setup fetches jars with"),
    Setting("SWITCHYARD_OBJECTSTORE_HEAP", "1g", "the local object store's JVM heap"),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}


def get(name: str, env: dict[str, str] | None = None) -> str | None:
    """The setting's value in effect: the environment's when set there, else its declared default."""
    env = os.environ if env is None else env
    return env[name] if name in env else BY_NAME[name].default


def effective(env: dict[str, str] | None = None) -> list[tuple[Setting, str | None, str]]:
    """Each setting with its value in effect (a secret's masked) and where it came from: the environment, or the
    default."""
    env = os.environ if env is None else env
    rows = []
    for setting in SETTINGS:
        if setting.name in env:
            value = "********" if setting.secret and env[setting.name] else env[setting.name]
            rows.append((setting, value, "environment"))
        else:
            rows.append((setting, setting.default, "default" if setting.default is not None else "unset"))
    return rows


def markdown_table() -> str:
    """The settings as docs/cli.md shows them."""
    lines = ["| setting | default | what it sets |", "|---|---|---|"]
    for s in SETTINGS:
        lines.append(f"| `{s.name}` | {f'`{s.default}`' if s.default is not None else ''} | {s.meaning} |")
    return "\n".join(lines)
