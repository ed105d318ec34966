"""A Spark Connect server for a test module (deploy/spark_connect_server.py): pyspark's own, on a free 127.0.0.1
port, with switchyard's jars and Delta's extension, Python UDFs in this interpreter; stopped when the module ends.
A test asks for the `spark_connect` fixture (registered in tests/conftest.py) and runs `switchyard` commands with
its `env()`."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import pytest

from switchyard.deploy import spark_connect_server
from switchyard.deploy.local_server import free_port


@dataclass(frozen=True)
class RunningServer:
    server: spark_connect_server.Server

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a `switchyard` command whose session is a Spark Connect client of this server."""
        return {**os.environ, "SPARK_REMOTE": self.server.url, **extra}


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory):
    server = spark_connect_server.Server.at(free_port(), tmp_path_factory.mktemp("spark-connect"))
    try:
        spark_connect_server.start(server)
        yield RunningServer(server)
    finally:
        spark_connect_server.stop(server)
        shutil.rmtree(server.home, ignore_errors=True)
