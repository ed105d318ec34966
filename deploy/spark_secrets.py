"""A new session's secrets kept off every process's command line (what `ps` shows): spark-submit puts each setting it
is launched with on the JVM's command line, and the driver's JVM options on the `java` one."""

from __future__ import annotations

import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

from switchyard.state_handoff import settings

# A setting whose name says it holds a secret (spark.hadoop.fs.s3a.secret.key, an executor's AWS_SECRET_ACCESS_KEY,
# spark.authenticate.secret, a keystore password): never on spark-submit's command line, where `ps` shows it.
_SECRET_SETTING = re.compile(r"pass|pwd|secret|token|access[._]?key|credential(?!s?\.provider)", re.IGNORECASE)
_JVM_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def _off_the_command_line(conf: dict[str, str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """`conf` apart: what the JVM is launched with (spark-submit's command line), the secret settings given to it once
    it runs (the SparkContext takes them from the gateway, not from a command line), and the driver's secret JVM
    options (read from an argument file at the JVM's start). An executor's secret options stay in its setting, given
    the same way; a worker starting an executor elsewhere puts them on that executor's command line."""
    launch, later = {}, {}
    for key, value in conf.items():
        (later if key not in _JVM_OPTIONS and _SECRET_SETTING.search(key) else launch)[key] = value
    options, driver_secrets = settings.split_secret_options(launch.get("spark.driver.extraJavaOptions", ""))
    if driver_secrets:
        launch["spark.driver.extraJavaOptions"] = options
    executor_options, executor_secrets = settings.split_secret_options(launch.get("spark.executor.extraJavaOptions", ""))
    if executor_secrets:
        launch["spark.executor.extraJavaOptions"] = executor_options
        later["spark.executor.extraJavaOptions"] = conf["spark.executor.extraJavaOptions"]
    return launch, later, driver_secrets


@contextmanager
def launched_without_secrets(conf: dict[str, str]):
    """The JVM launched with `conf`'s settings but its secrets (`_off_the_command_line`), when it has any: the
    driver's secret options in an argument file (`@FILE`, Java's own), readable by this user alone and deleted once
    the JVM has read it. Yields the settings the session is then built with."""
    launch, later, driver_secrets = _off_the_command_line(conf)
    if not later and not driver_secrets:
        yield conf
        return
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with tempfile.TemporaryDirectory(prefix="switchyard-jvm-") as folder:
        if driver_secrets:
            argfile = Path(folder) / "options"
            argfile.touch(mode=0o600)
            argfile.write_text("\n".join(driver_secrets) + "\n")
            launch["spark.driver.extraJavaOptions"] = f"{launch['spark.driver.extraJavaOptions']} @{argfile}".strip()
        SparkContext._ensure_initialized(gateway=launch_gateway(SparkConf(loadDefaults=False).setAll(launch.items())))
    yield {**launch, **later}
