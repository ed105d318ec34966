"""Every SWITCHYARD_* setting the code reads is in one table (state_handoff/settings.py), shown by docs/cli.md and by
`switchyard config` with its value in effect and where it came from; each is read through its kind into a typed
value, and a bad one is refused in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields
from datetime import date
from pathlib import Path

import pytest

from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.settings import BY_NAME, SETTINGS, Settings, markdown_table

ROOT = Path(__file__).resolve().parents[2]
READ = re.compile(r"SWITCHYARD_[A-Z0-9_]*[A-Z0-9]")


def test_every_setting_the_code_reads_is_in_the_table():
    sources = [p for folder in ("jobs", "state_handoff", "orchestration", "deploy", "benchmarks")
               for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh")] + [ROOT / "Makefile"]
    named = {name for path in sources for name in READ.findall(path.read_text())}
    named -= {"SWITCHYARD_KAFKA"}  # the prefix kafka_security.py reads them by
    named -= {"SWITCHYARD_YIELDING_CHILD_OF"}  # what jobs/cli/priority.py tells its child, not a setting
    assert named - set(BY_NAME) == set(), "settings read but not in state_handoff/settings.py"


def test_the_docs_show_the_table():
    assert markdown_table() in (ROOT / "docs" / "cli.md").read_text()


def test_config_shows_each_value_in_effect_and_where_it_came_from():
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")},
           "SWITCHYARD_WAREHOUSE": "/data/wh", "SWITCHYARD_KAFKA_SASL_PASSWORD": "hunter2"}
    shown = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "config"], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines()}
    assert set(lines) == set(BY_NAME)
    assert lines["SWITCHYARD_WAREHOUSE"].split()[1:] == ["/data/wh", "(environment)"]
    assert lines["SWITCHYARD_BOOTSTRAP"].split()[1:] == ["127.0.0.1:9092", "(default)"]
    assert lines["SWITCHYARD_KAFKA_SASL_PASSWORD"].split()[1:] == ["********", "(environment)"]
    assert "hunter2" not in shown.stdout
    assert lines["SWITCHYARD_PIPELINE"].split()[1:] == ["(unset)"]


def test_config_masks_the_secrets_inside_the_jvm_options():
    options = ("-Xmx1g -Djavax.net.ssl.keyStorePassword=hunter2 -Dfs.s3a.secret.key=AKIA/s3cr3t "
               "-Dapi.token='tok en' -XX:+UseG1GC -Dlog4j2.configurationFile=file:/etc/log4j2.xml")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")},
           "SWITCHYARD_JVM_OPTIONS": options}
    shown = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "config"], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith("SWITCHYARD_JVM_OPTIONS "))
    assert line.split()[1:] == ["-Xmx1g", "-Djavax.net.ssl.keyStorePassword=********", "-Dfs.s3a.secret.key=********",
                                "-Dapi.token=********", "-XX:+UseG1GC",
                                "-Dlog4j2.configurationFile=file:/etc/log4j2.xml", "(environment)"], line
    assert not any(secret in shown.stdout for secret in ("hunter2", "s3cr3t", "tok en"))
    assert "hunter2" not in repr(Settings.from_env({"SWITCHYARD_JVM_OPTIONS": options}))


def test_every_default_parses_by_its_kind():
    for setting in SETTINGS:
        typed = settings.default(setting.name)
        assert (typed is None) == (setting.default is None), setting.name
        assert settings.value(setting.name, {}) == typed, setting.name


# A bad value of each kind, and what the one-line refusal says it must be.
BAD = [
    ("SWITCHYARD_LEASE_SECONDS", "abc", "SWITCHYARD_LEASE_SECONDS must be a number of seconds above 0 and at most "
                                        "86400, not 'abc'"),
    ("SWITCHYARD_LEASE_SECONDS", "0", "SWITCHYARD_LEASE_SECONDS must be a number of seconds above 0 and at most "
                                      "86400, not '0'"),
    ("SWITCHYARD_LEASE_SECONDS", "nan", "above 0 and at most 86400, not 'nan'"),
    ("SWITCHYARD_REDEPLOY_NICE", "20", "SWITCHYARD_REDEPLOY_NICE must be a whole number of niceness steps from 0 to "
                                       "19, not '20'"),
    ("SWITCHYARD_TIDY_EVERY", "1.5", "SWITCHYARD_TIDY_EVERY must be a whole number of batches from 1 to "
                                     "1000000, not '1.5'"),
    ("SWITCHYARD_SHUFFLE_PARTITIONS", "0", "SWITCHYARD_SHUFFLE_PARTITIONS must be a whole number of partitions "
                                           "from 1 to 100000, not '0'"),
    ("SWITCHYARD_STATE_PARTITIONS", "two", "SWITCHYARD_STATE_PARTITIONS must be a whole number of partitions "
                                           "from 1 to 100000, not 'two'"),
    ("SWITCHYARD_MAX_RECORD_BYTES", "1023", "must be a whole number of bytes from 1024 to 1073741824, not '1023'"),
    ("SWITCHYARD_KAFKA_SSL_CHECK_HOSTNAME", "yes", "SWITCHYARD_KAFKA_SSL_CHECK_HOSTNAME must be true or false"),
    ("SWITCHYARD_SPARK_CDS", "off", "SWITCHYARD_SPARK_CDS must be true or false (or 1 or 0), not 'off'"),
    ("SWITCHYARD_SPARK_JARS", "maven", "SWITCHYARD_SPARK_JARS must be one of auto or provided, not 'maven'"),
    ("SWITCHYARD_KAFKA_SECURITY_PROTOCOL", "KERBEROS", "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, "
                                                      "not 'KERBEROS'"),
    ("SWITCHYARD_KAFKA_SASL_MECHANISM", "GSSAPI", "must be one of PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, "
                                                  "not 'GSSAPI'"),
    ("SWITCHYARD_SPARK_PROFILE", "fast", "SWITCHYARD_SPARK_PROFILE must be one of default or test, not 'fast'"),
    ("SWITCHYARD_ENV", "prod", "SWITCHYARD_ENV must be one of local or test, not 'prod'"),
    ("SWITCHYARD_DRIVER_MEMORY", "2 GB", "SWITCHYARD_DRIVER_MEMORY must be a JVM memory size such as 512m or 2g"),
    ("SWITCHYARD_OBJECTSTORE_HEAP", "0", "SWITCHYARD_OBJECTSTORE_HEAP must be a JVM memory size such as 512m"),
    ("SWITCHYARD_S3_ENDPOINT", "127.0.0.1:9000", "SWITCHYARD_S3_ENDPOINT must be an http:// or https:// URL"),
    ("SWITCHYARD_SCHEMA_REGISTRY_URL", "registry:8081", "SWITCHYARD_SCHEMA_REGISTRY_URL must be an http:// or https:// URL"),
    ("SWITCHYARD_SWITCH_BACK", "always", "SWITCHYARD_SWITCH_BACK must be one of"),
    ("SWITCHYARD_FIRST_DAY", "1 Dec 2025", "SWITCHYARD_FIRST_DAY must be a day as YYYY-MM-DD, not '1 Dec 2025'"),
    ("SWITCHYARD_FAULT", "stream.nowhere", "SWITCHYARD_FAULT must be `point[:n][:fail]`"),
    ("SWITCHYARD_FAULT", "stream.after_seed:0", "not 'stream.after_seed:0'"),
    ("SWITCHYARD_LOG_FORMAT", "yaml", "SWITCHYARD_LOG_FORMAT must be one of text or json, not 'yaml'"),
]

# Numbers out of any range a setting can hold: each refused in one line that names the range.
OUT_OF_RANGE = [
    ("SWITCHYARD_LEASE_SECONDS", "1e300", "SWITCHYARD_LEASE_SECONDS must be a number of seconds above 0 and at most "
                                          "86400, not '1e300'"),
    ("SWITCHYARD_LEASE_SECONDS", "inf", "above 0 and at most 86400, not 'inf'"),
    ("SWITCHYARD_LEASE_SECONDS", "-inf", "above 0 and at most 86400, not '-inf'"),
    ("SWITCHYARD_LEASE_SECONDS", "-5", "above 0 and at most 86400, not '-5'"),
    ("SWITCHYARD_LEASE_SECONDS", "86401", "above 0 and at most 86400, not '86401'"),
    ("SWITCHYARD_TIDY_EVERY", "1e300", "SWITCHYARD_TIDY_EVERY must be a whole number of batches from 1 to "),
    ("SWITCHYARD_TIDY_EVERY", "1" + "0" * 300, "SWITCHYARD_TIDY_EVERY must be a whole number of batches from 1 to "),
    ("SWITCHYARD_SHUFFLE_PARTITIONS", "1" + "0" * 300, "must be a whole number of partitions from 1 to 100000"),
    ("SWITCHYARD_STATE_PARTITIONS", "-1", "must be a whole number of partitions from 1 to 100000, not '-1'"),
    ("SWITCHYARD_MAX_RECORD_BYTES", "1e300", "must be a whole number of bytes from 1024 to 1073741824"),
    ("SWITCHYARD_MAX_RECORD_BYTES", str(1 << 40), "must be a whole number of bytes from 1024 to 1073741824"),
]


@pytest.mark.parametrize("name, text, says", BAD)
def test_a_bad_value_is_one_line_naming_the_setting(name, text, says):
    with pytest.raises(UserError) as refused:
        settings.value(name, {name: text})
    assert "\n" not in str(refused.value) and says in str(refused.value), str(refused.value)
    with pytest.raises(UserError, match=name):
        Settings.from_env({name: text})


@pytest.mark.parametrize("name, text, says", OUT_OF_RANGE)
def test_a_number_out_of_range_is_one_line_naming_the_range(name, text, says):
    with pytest.raises(UserError) as refused:
        Settings.from_env({name: text})
    assert "\n" not in str(refused.value) and says in str(refused.value), str(refused.value)


def test_the_longest_lease_is_held_and_renewed(tmp_path, monkeypatch):
    from switchyard.state_handoff.control import lease
    from switchyard.state_handoff.tables import Tables

    monkeypatch.setenv(lease.ENV, "86400")
    with lease.hold(Tables(str(tmp_path / "wh"), "demo"), lease.STREAM) as held:
        held.heartbeat()
        held.check_fresh()


def test_every_setting_that_can_refuse_a_value_is_tried():
    takes_any = (settings.TEXT, settings.FILE, settings.CHECKOUT_PATH, settings.HOME_PATH)
    assert {s.name for s in SETTINGS if s.kind not in takes_any} == {name for name, _, _ in BAD}


def test_an_unknown_crash_point_lists_the_points():
    from switchyard.state_handoff.faults import POINTS

    with pytest.raises(UserError) as refused:
        settings.value("SWITCHYARD_FAULT", {"SWITCHYARD_FAULT": "stream.nowhere"})
    assert all(point in str(refused.value) for point in POINTS)


def test_from_env_gives_typed_values():
    env = {"SWITCHYARD_WAREHOUSE": "s3a://bucket/wh", "SWITCHYARD_LEASE_SECONDS": "2.5",
           "SWITCHYARD_TIDY_EVERY": "7", "SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
           "SWITCHYARD_KAFKA_SSL_CHECK_HOSTNAME": "FALSE", "SWITCHYARD_SPARK_CDS": "0",
           "SWITCHYARD_FAULT": "stream.after_seed:3", "SWITCHYARD_HOME": "tmp/home",
           "SWITCHYARD_FIRST_DAY": "2026-01-31", "SWITCHYARD_SHUFFLE_PARTITIONS": "16",
           "SWITCHYARD_KAFKA_SSL_CAFILE": "/etc/ca.pem", "SWITCHYARD_PIPELINE": ""}
    held = Settings.from_env(env)
    assert held.warehouse == "s3a://bucket/wh"
    assert held.lease_seconds == 2.5 and held.tidy_every == 7 and held.shuffle_partitions == 16
    assert held.kafka_security_protocol == "SASL_SSL" and held.kafka_ssl_check_hostname is False
    assert held.spark_cds is False and held.fault == ("stream.after_seed", 3, False)
    assert held.home == ROOT / "tmp" / "home" and held.kafka_ssl_cafile == Path("/etc/ca.pem")
    assert held.first_day == date(2026, 1, 31)
    assert held.pipeline is None  # empty counts as unset
    assert held.state_partitions == 2 and held.max_record_bytes == 1 << 20 and held.bootstrap == "127.0.0.1:9092"


def test_settings_has_one_attribute_per_setting():
    assert [f.name for f in fields(Settings)] == [s.attribute for s in SETTINGS]


def test_a_secret_stays_out_of_the_settings_repr():
    shown = repr(Settings.from_env({"SWITCHYARD_KAFKA_SASL_PASSWORD": "hunter2"}))
    assert "hunter2" not in shown and "kafka_sasl_password='********'" in shown


def test_the_choices_are_the_profiles_and_environments_the_code_knows():
    from switchyard.deploy.spark import PROFILES

    assert set(settings.SPARK_PROFILES) == set(PROFILES)
    assert settings.ENVIRONMENTS == ("local", "test")  # orchestration/resources.py's SPARK_PROFILES, without dagster


def test_the_record_limit_is_at_least_a_dead_letter_prefix():
    from switchyard.state_handoff.language.record_limits import DEAD_LETTER_PREFIX_BYTES, MAX_RECORD_BYTES_ENV

    assert settings.value(MAX_RECORD_BYTES_ENV, {MAX_RECORD_BYTES_ENV: str(DEAD_LETTER_PREFIX_BYTES)}) == 1024
    with pytest.raises(UserError):
        settings.value(MAX_RECORD_BYTES_ENV, {MAX_RECORD_BYTES_ENV: str(DEAD_LETTER_PREFIX_BYTES - 1)})


def test_the_code_reads_no_setting_around_the_table():
    sources = [p for folder in ("jobs", "state_handoff", "orchestration", "deploy", "benchmarks")
               for p in (ROOT / folder).rglob("*.py")]
    around = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in sources for line in p.read_text().splitlines()
              if re.search(r"(environ\.get|getenv)\(\s*[\"']SWITCHYARD_", line)]
    assert around == []


def test_a_crash_point_armed_to_fail_raises_there_instead_of_the_kill():
    from switchyard.state_handoff import settings

    parse = settings.CRASH_POINT.parse
    assert parse("rebase.after_pause") == ("rebase.after_pause", 1, False)
    assert parse("rebase.after_pause:2") == ("rebase.after_pause", 2, False)
    assert parse("backfill.after_state:fail") == ("backfill.after_state", 1, True)
    assert parse("backfill.after_state:3:fail") == ("backfill.after_state", 3, True)
    for wrong in ("backfill.after_state:0:fail", "backfill.after_state:1:2", "backfill.after_state:never"):
        with pytest.raises(ValueError):
            parse(wrong)
