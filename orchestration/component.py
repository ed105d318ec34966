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


class SwitchyardComponent(dg.Component, dg.Model, dg.Resolvable):
    """Registered switchyard pipelines as Dagster assets, checks, jobs, schedules and sensors, one group each.

    warehouse, bootstrap, spark_master, environment: the shared resources (unset: the SWITCHYARD_* settings, read
    when a run starts)."""

    pipelines: list[PipelineModel]
    warehouse: str | None = None
    bootstrap: str | None = None
    spark_master: str | None = None
    environment: str | None = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from switchyard.orchestration.factory import switchyard_definitions
        from switchyard.orchestration.resources import resources_for

        resources = resources_for(self.environment)
        if self.warehouse:
            resources["warehouse"] = resources["warehouse"].model_copy(update={"warehouse": self.warehouse})
        if self.bootstrap:
            resources["kafka"] = resources["kafka"].model_copy(update={"bootstrap": self.bootstrap})
        if self.spark_master:
            resources["spark"] = resources["spark"].model_copy(update={"master": self.spark_master})
        return switchyard_definitions([PipelineDeployment(**p.model_dump()) for p in self.pipelines],
                                      resources=resources)
