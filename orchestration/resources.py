"""Spark, Kafka and the warehouse as configurable resources, chosen per environment in one place."""

import os

import dagster as dg

from state_handoff.pipelines import get_pipeline
from state_handoff.spec import Pipeline
from state_handoff.tables import Tables

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_WAREHOUSE = "./warehouse"
DEFAULT_PIPELINE = "demo"


class SparkResource(dg.ConfigurableResource):
    """The run's SparkSession, built by `deploy.spark` (Delta, local jars, UTC) with a profile."""

    profile: str = "default"
    master: str | None = None  # None: SWITCHYARD_SPARK_MASTER, else local[*]

    def session(self):
        from deploy.spark import build_spark

        return build_spark("switchyard-dagster", profile=self.profile,
                           extra_conf={"spark.master": self.master} if self.master else None)


class KafkaResource(dg.ConfigurableResource):
    """The Kafka cluster the pipeline's topic lives on."""

    bootstrap: str = DEFAULT_BOOTSTRAP


class WarehouseResource(dg.ConfigurableResource):
    """Where a pipeline's Delta tables and archive live, and which pipeline this deployment runs."""

    warehouse: str = DEFAULT_WAREHOUSE
    pipeline: str = DEFAULT_PIPELINE

    def spec(self) -> Pipeline:
        return get_pipeline(self.pipeline)

    def tables(self) -> Tables:
        return Tables(self.warehouse, self.pipeline)


class StreamMonitorResource(dg.ConfigurableResource):
    """When the watched stream needs attention: no new batch for stall_seconds while behind, more than
    max_offsets_behind offsets behind latest, or updates slower than max_update_latency_s at the 99th percentile."""

    stall_seconds: float = 300.0
    max_offsets_behind: int = 100_000
    max_update_latency_s: float = 60.0


def _env_or(name: str, default: str | None):
    """Read from the environment at run time when the variable is set; the shipped default otherwise."""
    return dg.EnvVar(name) if os.environ.get(name) else default


SPARK_PROFILES = {"local": "default", "test": "test"}


def resources_for(environment: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """The resources of an environment (SWITCHYARD_ENV: local, the default, or test)."""
    environment = environment or os.environ.get("SWITCHYARD_ENV", "local")
    if environment not in SPARK_PROFILES:
        raise ValueError(f"SWITCHYARD_ENV must be one of {', '.join(SPARK_PROFILES)}, not {environment!r}")
    return {
        "spark": SparkResource(profile=SPARK_PROFILES[environment], master=_env_or("SWITCHYARD_SPARK_MASTER", None)),
        "kafka": KafkaResource(bootstrap=_env_or("SWITCHYARD_BOOTSTRAP", DEFAULT_BOOTSTRAP)),
        "warehouse": WarehouseResource(warehouse=_env_or("SWITCHYARD_WAREHOUSE", DEFAULT_WAREHOUSE),
                                       pipeline=_env_or("SWITCHYARD_PIPELINE", DEFAULT_PIPELINE)),
        "monitor": StreamMonitorResource(),
    }
