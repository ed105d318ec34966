"""A real S3-compatible object store for a test module: S3Proxy on a free 127.0.0.1 port, its credentials and
endpoint in the environment of this process (and so of every `switchyard` subprocess it starts), stopped after.

A test asks for the `objectstore` and `s3a_spark` fixtures (registered in tests/conftest.py)."""

from __future__ import annotations

import secrets
import uuid

import pytest

from switchyard.deploy import objectstore as server
from switchyard.deploy.local_server import free_port
from switchyard.state_handoff.io import storage

BUCKET = server.BUCKET


@pytest.fixture(scope="module")
def objectstore(tmp_path_factory):
    """The running store; `objectstore.warehouse()` names a fresh warehouse in its bucket."""
    handle = _Handle(server.ObjectStore.at(free_port(), tmp_path_factory.mktemp("objectstore")),
                     (f"test-{uuid.uuid4().hex[:8]}", secrets.token_hex(16)))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in handle.env.items():
            patch.setenv(name, value)
        server.start(handle.store)
        try:
            yield handle
        finally:
            server.stop(handle.store)


class _Handle:
    def __init__(self, store: server.ObjectStore, credentials: tuple[str, str]):
        self.store, self.credentials, self.endpoint = store, credentials, store.endpoint
        self.env = {"AWS_ACCESS_KEY_ID": credentials[0], "AWS_SECRET_ACCESS_KEY": credentials[1],
                    storage.ENDPOINT_ENV: store.endpoint}

    def warehouse(self) -> str:
        return f"s3a://{BUCKET}/{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def s3a_spark(spark, objectstore):
    """The session's SparkSession reading the store: S3A settings for the bucket set on its Hadoop configuration
    at run time (the JVM started before the credentials were in the environment, so they are set as keys)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    key, secret = objectstore.credentials
    prefix = f"fs.s3a.bucket.{BUCKET}."
    settings = {"endpoint": objectstore.endpoint, "path.style.access": "true", "connection.ssl.enabled": "false",
                "endpoint.region": storage.s3_region(), "access.key": key, "secret.key": secret,
                "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
    for name, value in settings.items():
        hadoop.set(prefix + name, value)
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    yield spark
    for name in settings:
        hadoop.unset(prefix + name)
    hadoop.unset("fs.s3a.impl.disable.cache")
