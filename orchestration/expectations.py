"""Great Expectations suites run on Spark DataFrames, reported as Dagster asset check results."""

from dataclasses import dataclass

import dagster as dg
import great_expectations as gx
from great_expectations.data_context.types.base import (DataContextConfig, InMemoryStoreBackendDefaults,
                                                        ProgressBarsConfig)
from pyspark.sql import DataFrame


@dataclass(frozen=True)
class Outcome:
    expectation: str
    passed: bool
    unexpected_rows: int | None
    error: str | None = None


def _context():
    return gx.get_context(mode="ephemeral", project_config=DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(), analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False)))


def label(config) -> str:
    """What an expectation asserts, e.g. `expect_column_values_to_be_unique(key)`."""
    kwargs = config.kwargs
    columns = [kwargs[k] for k in ("column", "column_A", "column_B") if kwargs.get(k)]
    columns += kwargs.get("column_list") or []
    if columns:
        return f"{config.type}({', '.join(columns)})"
    return f"{config.type}: {config.description}" if config.description else config.type


def _error(exception_info) -> str | None:
    infos = [exception_info] if "raised_exception" in (exception_info or {}) else (exception_info or {}).values()
    raised = [i for i in infos if isinstance(i, dict) and i.get("raised_exception")]
    return str(raised[0].get("exception_message") or "raised").splitlines()[0][:300] if raised else None


def _outcome(result) -> Outcome:
    config = result.expectation_config
    unexpected = result.result.get("unexpected_count")
    if unexpected is None and config.type == "unexpected_rows_expectation":
        unexpected = result.result.get("observed_value")
    return Outcome(label(config), bool(result.success), None if unexpected is None else int(unexpected),
                   _error(result.exception_info))


def run_suite(df: DataFrame, name: str, expectations: list) -> list[Outcome]:
    """Validate the whole DataFrame against the expectations in an ephemeral (in-memory) GX context.

    The DataFrame is cached for the suite's several passes and released after (GX's own cache never is).
    """
    batch = (_context().data_sources.add_spark(name="switchyard", persist=False).add_dataframe_asset(name=name)
             .add_batch_definition_whole_dataframe(name).get_batch(batch_parameters={"dataframe": df}))
    df.persist()
    try:
        validation = batch.validate(gx.ExpectationSuite(name=name, expectations=expectations))
    finally:
        df.unpersist()
    return [_outcome(r) for r in validation.results]


def check_result(outcomes: list[Outcome], **extra_metadata) -> dg.AssetCheckResult:
    """Passed when every expectation held; the metadata names each failed expectation and its unexpected rows."""
    failed = [o for o in outcomes if not o.passed]
    rows = "\n".join(f"| `{o.expectation}` | {'passed' if o.passed else 'FAILED'} | "
                     f"{'' if o.unexpected_rows is None else o.unexpected_rows} | {o.error or ''} |" for o in outcomes)
    metadata = {
        "expectations": len(outcomes),
        "failed_expectations": ", ".join(o.expectation for o in failed) or "none",
        "unexpected_rows": sum(o.unexpected_rows or 0 for o in failed),
        "results": dg.MetadataValue.md("| expectation | result | unexpected rows | error |\n|---|---|---|---|\n" + rows),
        **{f"unexpected_rows: {o.expectation}": o.unexpected_rows or 0 for o in failed},
        **extra_metadata,
    }
    description = ("all expectations held" if not failed else
                   "; ".join(f"{o.expectation} failed on {o.unexpected_rows} rows" if o.error is None
                             else f"{o.expectation} could not run: {o.error}" for o in failed))
    return dg.AssetCheckResult(passed=not failed, metadata=metadata, description=description)
