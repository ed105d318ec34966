"""Spark, Kafka and the warehouse as configurable resources, chosen per environment in one place.

Each resource takes the same fields as the SWITCHYARD_* settings it stands for (and AWS_* for the object store's
keys); give a secret as `dg.EnvVar("NAME")`, so that only its name is in the run's configuration. A field that is
set is handed to switchyard for the run's work (`settings.given_to_process`), over the process's environment and
without a write to it: the Kafka clients and Spark read it from there, and the stream process the run starts is
handed it in its environment. No other library in the process, and no other code location, sees it.
"""

from contextlib import contextmanager
from functools import lru_cache

import dagster as dg

from switchyard.state_handoff import settings


class SparkResource(dg.ConfigurableResource):
    """The run's SparkSession, built by `switchyard.deploy.spark` (Delta, local jars, UTC) with a profile."""

    profile: str = "default"
    master: str | None = None  # None: the platform's (spark-submit's), else SWITCHYARD_SPARK_MASTER, else local[*]
    # Spark settings over switchyard's and the platform's, as `--conf` gives them on the command line
    spark_config: dict[str, str] = {}

    def session(self):
        """The run process's session: the one it already has, as it is; else one built with these settings."""
        from switchyard.deploy.spark import build_spark

        return build_spark("switchyard-dagster", profile=self.profile,
                           extra_conf={**self.spark_config, **({"spark.master": self.master} if self.master else {})})


class KafkaResource(dg.ConfigurableResource):
    """The Kafka cluster the pipelines' topics live on, how to reach it (SWITCHYARD_KAFKA_* when unset), and the
    schema registry its Avro values' writer schemas are in (SWITCHYARD_SCHEMA_REGISTRY_URL when unset)."""

    bootstrap: str = settings.default("SWITCHYARD_BOOTSTRAP")
    security_protocol: str | None = None  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None  # a secret: dg.EnvVar("...")
    ssl_cafile: str | None = None
    schema_registry_url: str | None = None
    schema_registry_user_info: str | None = None  # `user:password`, a secret: dg.EnvVar("...")

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext):
        from switchyard.state_handoff.io import kafka_security

        with settings.given_to_process({"SWITCHYARD_KAFKA_SECURITY_PROTOCOL": self.security_protocol,
                                        "SWITCHYARD_KAFKA_SASL_MECHANISM": self.sasl_mechanism,
                                        "SWITCHYARD_KAFKA_SASL_USERNAME": self.sasl_username,
                                        "SWITCHYARD_KAFKA_SASL_PASSWORD": self.sasl_password,
                                        "SWITCHYARD_KAFKA_SSL_CAFILE": self.ssl_cafile,
                                        "SWITCHYARD_SCHEMA_REGISTRY_URL": self.schema_registry_url,
                                        "SWITCHYARD_SCHEMA_REGISTRY_USER_INFO": self.schema_registry_user_info}):
            kafka_security.from_env()  # an incomplete or unknown setting fails the run in one line, before any work
            yield self


class WarehouseResource(dg.ConfigurableResource):
    """Where the pipelines' Delta tables and archives live: `<warehouse>/<pipeline>/` each; for an `s3a://`
    warehouse, the object store's endpoint and keys (SWITCHYARD_S3_ENDPOINT and AWS_* when unset)."""

    warehouse: str = settings.default("SWITCHYARD_WAREHOUSE")
    s3_endpoint: str | None = None
    aws_access_key_id: str | None = None  # a secret: dg.EnvVar("...")
    aws_secret_access_key: str | None = None  # a secret: dg.EnvVar("...")

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext):
        with settings.given_to_process({"SWITCHYARD_S3_ENDPOINT": self.s3_endpoint,
                                        "AWS_ACCESS_KEY_ID": self.aws_access_key_id,
                                        "AWS_SECRET_ACCESS_KEY": self.aws_secret_access_key}):
            yield self


class StreamMonitorResource(dg.ConfigurableResource):
    """When the watched stream needs attention: no new batch for stall_seconds while behind, more than
    max_offsets_behind offsets behind latest, or updates slower than max_update_latency_s at the 99th percentile."""

    stall_seconds: float = 300.0
    max_offsets_behind: int = 100_000
    max_update_latency_s: float = 60.0


def _set_in_env(**fields: str) -> dict:
    """Each resource field whose setting the environment sets, as a dg.EnvVar read at run time; the fields left out
    keep their defaults."""
    return {field: dg.EnvVar(name) for field, name in fields.items() if settings.given(name) is not None}


SPARK_PROFILES = {"local": "default", "test": "test"}


# The keys switchyard's assets, checks, jobs and sensors take their resources by: prefixed, so that a project's own
# `spark` or `warehouse` resource lives beside them.
SPARK, KAFKA, WAREHOUSE, MONITOR = "switchyard_spark", "switchyard_kafka", "switchyard_warehouse", "switchyard_monitor"


def resources_for(environment: str | None = None,
                  spark_master: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """The resources of an environment (SWITCHYARD_ENV: local, the default, or test), under switchyard's keys.
    Built once per process for the same arguments and settings: every `switchyard_definitions` and Component of a
    code location binds the same objects, so Dagster merges them."""
    environment = environment or settings.value("SWITCHYARD_ENV")
    if environment not in SPARK_PROFILES:
        raise ValueError(f"the environment must be one of {', '.join(SPARK_PROFILES)}, not {environment!r}")
    given = tuple(settings.given(name) is not None
                  for name in ("SWITCHYARD_SPARK_MASTER", "SWITCHYARD_BOOTSTRAP", "SWITCHYARD_WAREHOUSE"))
    return dict(_resources(environment, spark_master, given))


@lru_cache(maxsize=None)
def _resources(environment: str, spark_master: str | None, given: tuple) -> tuple:
    master = {"master": spark_master} if spark_master else _set_in_env(master="SWITCHYARD_SPARK_MASTER")
    return ((SPARK, SparkResource(profile=SPARK_PROFILES[environment], **master)),
            (KAFKA, KafkaResource(**_set_in_env(bootstrap="SWITCHYARD_BOOTSTRAP"))),
            (WAREHOUSE, WarehouseResource(**_set_in_env(warehouse="SWITCHYARD_WAREHOUSE"))),
            (MONITOR, StreamMonitorResource()))
