"""The one settings schema and every surface derived from it (engine-free)."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from delta_destination.doors.airbyte.config import parse_config as airbyte_config, spec as airbyte_spec
from delta_destination.doors.conduit.params import parse_config as conduit_config
from delta_destination.doors.conduit.spec import specification as conduit_spec
from delta_destination.errors import InvalidRequest
from delta_destination.doors.fivetran.setup_form import configuration_form
from delta_destination.settings import (CONNECTION_FIELDS, FIELDS, PROCESS, Settings, add_flags, from_flags,
                                        markdown_table)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "SECRET-9f1c-not-for-logs"


def test_every_surface_offers_the_same_keys():
    keys = [f.key for f in CONNECTION_FIELDS]
    form = configuration_form(Settings.create("/wh"))
    assert [f.name for f in form.fields] == keys
    assert list(airbyte_spec()["connectionSpecification"]["properties"])[:len(keys)] == keys
    assert set(keys) <= set(conduit_spec().destination_params)
    flags = argparse.ArgumentParser()
    add_flags(flags, PROCESS)
    offered = {a.dest for a in flags._actions}   # noqa: SLF001 - argparse has no public list of its actions
    assert offered == {f.key for f in FIELDS if not f.secret} | {"help"}


def test_secrets_are_marked_secret_on_every_surface_and_never_flags():
    secrets = [f.key for f in FIELDS if f.secret]
    assert secrets == ["s3_secret_access_key", "s3_session_token", "azure_account_key", "azure_sas_token",
                       "azure_client_secret", "gcs_service_account_key",
                       "iceberg_catalog_uri"]   # a SQLAlchemy URL may carry a database password
    form = {f.name: f for f in configuration_form(Settings.create("/wh")).fields}
    props = airbyte_spec()["connectionSpecification"]["properties"]
    for key in secrets:
        assert form[key].WhichOneof("type") == "text_field" and form[key].text_field == 1   # Password
        assert props[key]["airbyte_secret"] is True
    parser = argparse.ArgumentParser()
    add_flags(parser, PROCESS)
    assert not any("secret" in opt or "token" in opt or "service-account-key" in opt for a in parser._actions for opt in a.option_strings)  # noqa: SLF001


def test_the_same_values_make_the_same_settings_through_every_door():
    values = {"warehouse": "s3a://bucket/wh/", "engine": "spark", "s3_endpoint": "http://127.0.0.1:8333",
              "s3_region": "eu-west-1", "s3_access_key_id": "AKIA", "s3_secret_access_key": SECRET,
              "s3_path_style": "true", "catalog_uri": "thrift://127.0.0.1:9083"}
    fivetran = Settings.create("/default").resolve(values)
    airbyte = airbyte_config(values).settings
    conduit = conduit_config(values).settings
    assert fivetran == airbyte == conduit
    assert fivetran.warehouse == "s3://bucket/wh"          # one spelling: s3a:// is read as s3://
    assert fivetran.storage.s3.secret_access_key == SECRET and fivetran.storage.s3.path_style is True
    assert SECRET not in repr(fivetran)


def test_older_key_spellings_are_still_read():
    assert airbyte_config({"warehouse_path": "/a"}).settings.warehouse == "/a"
    assert conduit_config({"warehouse": "/a", "spark.remote": "sc://h:1"}).settings.spark_remote == "sc://h:1"
    assert Settings.create("/x").resolve({"warehouse_path": "/b"}).warehouse == "/b"


def test_precedence_request_over_flag_over_environment_over_default(monkeypatch):
    parser = argparse.ArgumentParser()
    add_flags(parser, PROCESS)
    env = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_REGION": "env-region"}
    base = from_flags(parser.parse_args(["--s3-region", "flag-region"]), env)
    assert base.storage.s3.endpoint == "http://env:1" and base.storage.s3.region == "flag-region"
    assert base.warehouse.endswith("/warehouse")
    request = base.resolve({"s3_region": "request-region", "warehouse": ""})   # empty = keep
    assert request.storage.s3.region == "request-region" and request.warehouse == base.warehouse


@pytest.mark.parametrize("values, words", [
    ({"engine": "duckdb"}, "engine must be one of"),
    ({"spark_remote": "http://x"}, "sc://"),
    ({"catalog_uri": "http://x"}, "thrift://"),
    ({"s3_endpoint": "127.0.0.1:8333"}, "http:// or https://"),
    ({"s3_access_key_id": "AKIA"}, "go together"),
    ({"s3_secret_access_key": SECRET}, "go together"),
    ({"s3_path_style": "sometimes"}, "true or false"),
    ({"memory_budget_gb": "-1"}, "positive"),
])
def test_bad_values_are_refused_naming_the_key_never_the_secret(values, words):
    with pytest.raises(InvalidRequest) as info:
        Settings.create("/wh").resolve(values)
    assert words in info.value.message and SECRET not in info.value.message


def test_readme_configuration_table_is_the_schema():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- settings:begin -->\n(.*?)\n<!-- settings:end -->", readme, re.S)
    assert block, "README.md lacks the generated settings table (python -m delta_destination.settings)"
    assert block.group(1) == markdown_table()


def test_runtime_settings_are_the_same_on_every_long_running_door():
    """How a door's process runs its engines (RUNTIME_FIELDS): server flags, an Airbyte config and a
    Conduit connector's settings, the same keys and checks; not the per-connection Fivetran form."""
    from delta_destination.settings import RUNTIME_FIELDS, Runtime, runtime_from_values

    keys = [f.key for f in RUNTIME_FIELDS]
    assert keys == ["spark_idle_minutes", "engine_max_memory_mb", "engine_memory_headroom_mb", "engine_max_requests",
                    "compact_small_files", "metrics_port"]
    assert not set(keys) & {f.name for f in configuration_form(Settings.create("/wh")).fields}
    assert set(keys) <= set(airbyte_spec()["connectionSpecification"]["properties"])
    assert set(keys) <= set(conduit_spec().destination_params)
    parser = argparse.ArgumentParser()
    add_flags(parser, PROCESS)
    args = parser.parse_args(["--engine-max-memory-mb", "300", "--metrics-port", "127.0.0.1:9464"])
    from_server = runtime_from_values({k: getattr(args, k) for k in keys}, environ={})
    values = {"warehouse": "/wh", "engine_max_memory_mb": 300, "metrics_port": "127.0.0.1:9464"}
    assert airbyte_config(values).runtime == from_server
    assert conduit_config({**values, "engine_max_memory_mb": "300"}).runtime == from_server
    assert from_server == Runtime(engine_max_memory_mb=300.0, metrics_port="127.0.0.1:9464")
    # Unset: each door's default bound; a Conduit connector's is derived from its engine (its size once
    # warm + a headroom of 256 MiB), under the same ceiling.
    unset = runtime_from_values({}, environ={})
    assert (unset.engine_memory_bound_mb("fivetran"), unset.engine_memory_bound_mb("conduit")) == (1024, 1024)
    assert (unset.engine_memory_headroom("fivetran"), unset.engine_memory_headroom("conduit")) == (0, 256)
    assert conduit_config({"warehouse": "/wh", "engine_memory_headroom_mb": "0"}).runtime.engine_memory_headroom("conduit") == 0
    assert runtime_from_values({}, environ={"DELTA_DESTINATION_ENGINE_MEMORY_HEADROOM_MB": "128"}
                               ).engine_memory_headroom("fivetran") == 128
    assert runtime_from_values({}, environ={"DELTA_DESTINATION_ENGINE_MAX_MEMORY_MB": "700"}).engine_max_memory_mb == 700
    for bad, message in (({"metrics_port": "nine"}, "metrics_port"), ({"engine_max_memory_mb": -1}, "engine_max_memory_mb"),
                         ({"engine_memory_headroom_mb": "lots"}, "engine_memory_headroom_mb"),
                         ({"engine_max_requests": "x"}, "engine_max_requests")):
        with pytest.raises(InvalidRequest, match=message):
            runtime_from_values(bad, environ={})


def test_every_default_is_written_once_in_its_declaration():
    """Settings', Runtime's and the engines' and upkeep's defaults are the declarations' (FIELDS):
    no second copy to drift."""
    import inspect

    from delta_destination.core.upkeep import PeriodicUpkeep, UpkeepOptions
    from delta_destination.engines.pool import EnginePool
    from delta_destination.settings import RUNTIME_FIELDS, Runtime, default_of, runtime_from_values

    for f in RUNTIME_FIELDS:
        assert getattr(Runtime(), f.key) == f.default_value == getattr(runtime_from_values({}, environ={}), f.key)
    assert Settings(warehouse="/wh").engine == default_of("engine") == "auto"
    assert inspect.signature(EnginePool).parameters["idle_minutes"].default == default_of("spark_idle_minutes")
    assert inspect.signature(PeriodicUpkeep).parameters["idle_minutes"].default == default_of("upkeep_idle_minutes")
    assert UpkeepOptions().retention_hours == default_of("vacuum_retention_hours")
    from delta_destination.engines.supervisor import RecyclePolicy
    assert RecyclePolicy().max_requests == default_of("engine_max_requests")
    # counts are integers by their declaration, quantities floats
    parsed = runtime_from_values({"compact_small_files": "7", "spark_idle_minutes": "2"}, environ={})
    assert (parsed.compact_small_files, parsed.spark_idle_minutes) == (7, 2.0) and type(parsed.compact_small_files) is int
