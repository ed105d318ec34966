"""`SwitchyardComponent`: the factory as a Dagster Component, declared in a project's `defs` folder in YAML:

    # <project>/defs/switchyard/defs.yaml
    type: switchyard.SwitchyardComponent
    attributes:
      pipelines:
        - pipeline: orders
          first_day: "2026-01-01"
      warehouse: /data/warehouse
      bootstrap: broker-1:9092

`dg.load_from_defs_folder` (and the `dg` command line) load it with the project's other definitions.
"""

from __future__ import annotations

import dagster as dg

from switchyard.orchestration.scope import DEFAULT_BACKFILL_CRON, PipelineDeployment


class PipelineModel(dg.Model):
    """One pipeline as the component deploys it (the fields of `PipelineDeployment`)."""

    pipeline: str
    first_day: str
    backfill_cron: str = DEFAULT_BACKFILL_CRON
    schedule_running: bool = False
    sensor_running: bool = True
    served: bool = False  # its stream lives under `switchyard serve`; Dagster asks the service for it


class SwitchyardComponent(dg.Component, dg.Model, dg.Resolvable):
    """Registered switchyard pipelines as Dagster assets, checks, jobs, schedules and sensors, one group each.

    warehouse, bootstrap: where these pipelines' tables live and their Kafka cluster (unset: the SWITCHYARD_*
    settings, read when a run starts); spark_master, environment: the Spark session's (one per process, shared by
    every switchyard Component of the code location)."""

    pipelines: list[PipelineModel]
    warehouse: str | None = None
    bootstrap: str | None = None
    spark_master: str | None = None
    environment: str | None = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from switchyard.orchestration.factory import switchyard_definitions
        from switchyard.orchestration.resources import resources_for

        return switchyard_definitions([PipelineDeployment(**p.model_dump(), warehouse=self.warehouse,
                                                          bootstrap=self.bootstrap) for p in self.pipelines],
                                      resources=resources_for(self.environment, self.spark_master))
