"""One pipeline's place in a code location: how it is deployed (`PipelineDeployment`), how its assets and
definitions are named (`SwitchyardTranslator`), and both together as each domain module builds from (`Scope`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property

import dagster as dg

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language.pipelines import get_pipeline, reference
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

DEFAULT_BACKFILL_CRON = "30 0 * * *"


def identifier(name: str) -> str:
    """`name` as a Dagster name (letters, digits, underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


class SwitchyardTranslator:
    """How a pipeline's assets and definitions are named in Dagster. Subclass it and override a method to change
    keys, groups or tags, as dagster-dbt's `DagsterDbtTranslator` does for dbt models.

    The names of the assets a pipeline has: `archive`, `tiles`, `state`, `windows`, `window_state` (windowed
    pipelines only), `handoff`, `stream`. The names of its other definitions: `backfill_then_stream`,
    `backfill_days`, `rebase_stream`, `stop_stream` (jobs), `backfill_newest_day` (schedule), `stream_health`
    (sensor), and the ops and multi-assets behind them.
    """

    def get_asset_key(self, pipeline: str, asset: str) -> dg.AssetKey:
        return dg.AssetKey([pipeline, asset])

    def get_group_name(self, pipeline: str) -> str:
        return identifier(pipeline)

    def get_tags(self, pipeline: str, asset: str) -> dict[str, str]:
        return {"switchyard/pipeline": pipeline}

    def get_definition_name(self, pipeline: str, name: str) -> str:
        return f"{identifier(pipeline)}__{name}"


@dataclass(frozen=True)
class PipelineDeployment:
    """A pipeline as a code location deploys it.

    pipeline: a `Pipeline` (declared at a module's top level, so that the stream process finds it), its name in
    the registry (`switchyard pipelines`), or a reference `module:NAME`; first_day: its first daily partition
    (YYYY-MM-DD), read as given, nothing is listed when the code location loads; backfill_cron: when its schedule
    backfills the day that just ended (UTC); schedule_running, sensor_running: whether the schedule and the `stream_health`
    sensor start running as the code location loads; warehouse, bootstrap: where this pipeline's tables live and
    its Kafka cluster, when not the `switchyard_warehouse` and `switchyard_kafka` resources' (so deployments of
    several warehouses or clusters share one set of resources); served: its stream lives under `switchyard serve`,
    so the `stream` asset and the `start_stream` job ask the service for it (a START_REQUESTED) and end once it
    runs, and no Dagster run owns a stream process (unset: a run launches the stream as its child, as on a laptop).
    """

    pipeline: str | Pipeline
    first_day: str | date
    backfill_cron: str = DEFAULT_BACKFILL_CRON
    schedule_running: bool = False
    sensor_running: bool = True
    warehouse: str | None = None
    bootstrap: str | None = None
    served: bool = False

    def __post_init__(self):
        try:
            day = self.first_day if isinstance(self.first_day, date) else date.fromisoformat(str(self.first_day))
        except ValueError:
            name = self.pipeline if isinstance(self.pipeline, str) else self.pipeline.name
            raise UserError(f"pipeline {name}: first_day {self.first_day!r} is not a day: give it as "
                            "YYYY-MM-DD") from None
        object.__setattr__(self, "first_day", day)


@dataclass(frozen=True)
class Scope:
    """A deployment seen through a translator: what each domain module's `build` names and reads."""

    deployment: PipelineDeployment
    translator: SwitchyardTranslator = field(default_factory=SwitchyardTranslator)

    @property
    def pipeline(self) -> str:
        return self.spec.name

    @cached_property
    def spec(self) -> Pipeline:
        given = self.deployment.pipeline
        return get_pipeline(given) if isinstance(given, str) else given

    @cached_property
    def reference(self) -> str:
        """What the stream process Dagster starts finds the pipeline by (`--pipeline`)."""
        return reference(self.spec)

    @property
    def windowed(self) -> bool:
        return self.spec.windows is not None

    def key(self, asset: str) -> dg.AssetKey:
        return self.translator.get_asset_key(self.pipeline, asset)

    @property
    def group(self) -> str:
        return self.translator.get_group_name(self.pipeline)

    def tags(self, asset: str) -> dict[str, str]:
        return self.translator.get_tags(self.pipeline, asset)

    def name(self, definition: str) -> str:
        return self.translator.get_definition_name(self.pipeline, definition)

    @cached_property
    def daily(self) -> dg.DailyPartitionsDefinition:
        return dg.DailyPartitionsDefinition(start_date=self.deployment.first_day.isoformat(), timezone="UTC")

    @property
    def backlog_assets(self) -> list[str]:
        """The assets a backfill materializes (windows only for a windowed pipeline)."""
        return ["archive", "tiles", "state", *(["windows", "window_state"] if self.windowed else [])]

    def tables(self, warehouse) -> Tables:
        """The pipeline's tables: under the deployment's warehouse, else under `warehouse` (a WarehouseResource)."""
        return Tables(self.deployment.warehouse or warehouse.warehouse, self.pipeline)

    def bootstrap(self, kafka) -> str:
        """The deployment's Kafka cluster, else `kafka`'s (a KafkaResource)."""
        return self.deployment.bootstrap or kafka.bootstrap
