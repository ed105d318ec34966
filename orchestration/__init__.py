"""Dagster definitions of switchyard: assets, checks, jobs, schedules and sensors over jobs/ and state_handoff/,
built per pipeline by `switchyard_definitions` (orchestration/factory.py) or the `SwitchyardComponent`
(orchestration/component.py)."""

__all__ = ["PipelineDeployment", "SwitchyardComponent", "SwitchyardTranslator", "switchyard_definitions"]


def __getattr__(name: str):
    """The public names, imported on first use (the factory imports Spark and Great Expectations)."""
    if name == "switchyard_definitions":
        from switchyard.orchestration.factory import switchyard_definitions
        return switchyard_definitions
    if name in ("PipelineDeployment", "SwitchyardTranslator"):
        from switchyard.orchestration import scope
        return getattr(scope, name)
    if name == "SwitchyardComponent":
        from switchyard.orchestration.component import SwitchyardComponent
        return SwitchyardComponent
    raise AttributeError(f"module 'orchestration' has no attribute {name!r}")
