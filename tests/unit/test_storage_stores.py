"""The table of stores (delta_destination/storage): which store serves a URL, and each store's
conversions of its settings for delta-rs, an embedded Sail process and Spark. Pure functions: no server."""
from __future__ import annotations

import pytest

from delta_destination.errors import InvalidRequest
from delta_destination.settings import Settings, from_environment, from_values
from delta_destination.storage import (AzureOptions, AzureStorage, GcsOptions, GcsStorage, LocalStorage, S3Options, S3Storage,
                                       StorageOptions,
                                       UnlistedStorage, canonical, delta_rs_options, sail_environment,
                                       served_by_environment, storage_for, store_for)
from delta_destination.storage.azure import EMULATOR_KEY
from delta_destination.storage.gcs import hadoop_conf as gcs_hadoop_conf

ABFSS = "abfss://cont@acct.dfs.core.windows.net/wh"


@pytest.mark.parametrize("root,store,kind", [
    ("/data/wh", "local", LocalStorage), ("s3://b/wh", "s3", S3Storage), ("s3a://b/wh", "s3", S3Storage),
    (ABFSS, "azure", AzureStorage), ("az://cont/wh", "azure", AzureStorage),
    ("wasbs://cont@acct.blob.core.windows.net/wh", "azure", AzureStorage), ("gs://b/wh", "gcs", GcsStorage),
    ("gcs://b/wh", "gcs", GcsStorage),
    ("dbfs:/mnt/wh", "unlisted", UnlistedStorage),
])
def test_one_table_chooses_the_store_by_scheme(root, store, kind):
    assert store_for(canonical(root)).name == store
    assert type(storage_for(root)) is kind


def test_azure_spellings_are_canonical_and_object_store_reads_the_blob_form_as_dfs():
    assert canonical("ABFS://cont@acct.dfs.core.windows.net/wh/") == ABFSS
    assert canonical("wasb://cont@acct.blob.core.windows.net/wh") == "wasbs://cont@acct.blob.core.windows.net/wh"
    assert store_for(ABFSS).object_store_path("wasbs://cont@acct.blob.core.windows.net/wh") == ABFSS


def test_settings_take_the_standard_azure_variables_and_keep_secrets_out_of_repr():
    env = {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "k3y", "AZURE_STORAGE_SAS_TOKEN": "s4s",
           "AZURE_CLIENT_ID": "cid", "AZURE_CLIENT_SECRET": "cs3cret", "AZURE_TENANT_ID": "tid",
           "AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": "http://127.0.0.1:9"}
    s = from_values({"warehouse": ABFSS, **from_environment(env)})
    assert s.storage.azure == AzureOptions("acct", "k3y", "s4s", "cid", "cs3cret", "tid", True, "http://127.0.0.1:9")
    assert not any(secret in repr(s) for secret in ("k3y", "s4s", "cs3cret"))
    # the same environment serves these settings: the embedded engine's own process is used
    assert served_by_environment(s.storage, env)


def test_a_client_secret_needs_its_client_and_tenant():
    with pytest.raises(InvalidRequest, match="azure_client_secret"):
        Settings.create(ABFSS, azure_client_secret="x")


def test_delta_rs_reaches_the_emulator_through_its_account_endpoint():
    opts = delta_rs_options(ABFSS, StorageOptions(azure=AzureOptions(use_emulator=True, emulator_url="http://h:1")))
    assert opts == {"azure_storage_account_name": "devstoreaccount1", "azure_storage_account_key": EMULATOR_KEY,
                    "azure_storage_endpoint": "http://h:1/devstoreaccount1", "azure_allow_http": "true"}
    sas = delta_rs_options(ABFSS, StorageOptions(azure=AzureOptions(account_name="a", sas_token="sv=1&sig=x")))
    assert sas == {"azure_storage_account_name": "a", "azure_storage_sas_token": "sv=1&sig=x"}
    assert delta_rs_options("s3://b/wh", StorageOptions(azure=AzureOptions(account_name="a"))) == {}


def test_a_sail_process_gets_the_settings_its_environment_lacks_per_store():
    """Azure settings the environment does not give replace its AZURE_* variables; its S3 variables stay."""
    environ = {"AWS_REGION": "eu", "AZURE_STORAGE_ACCOUNT_NAME": "other", "AZURE_CLIENT_ID": "x", "HOME": "/h"}
    options = StorageOptions(azure=AzureOptions(account_name="acct", account_key="k"))
    assert not served_by_environment(options, environ)
    env = sail_environment(options, environ)
    assert env["AZURE_STORAGE_ACCOUNT_NAME"] == "acct" and env["AZURE_STORAGE_ACCOUNT_KEY"] == "k"
    assert "AZURE_CLIENT_ID" not in env and env["AWS_REGION"] == "eu" and env["HOME"] == "/h"


def test_settings_of_another_store_make_another_identity():
    a = StorageOptions(azure=AzureOptions(account_key="x"))
    b = StorageOptions(azure=AzureOptions(account_key="y"))
    assert a.identity() != b.identity() and StorageOptions().identity() == StorageOptions().identity()


def test_spark_gets_s3a_and_no_hadoop_settings_for_stores_without_them():
    s3 = store_for("s3://b/wh")
    assert s3.spark_path("s3://b/wh/t") == "s3a://b/wh/t"
    assert s3.hadoop_conf("s3://b/wh", StorageOptions(s3=S3Options(region="r"))) == {"fs.s3a.bucket.b.endpoint.region": "r"}
    assert store_for("/wh").hadoop_conf("/wh", StorageOptions(s3=S3Options(region="r"))) == {}


# ---- Google Cloud Storage ------------------------------------------------------------------------

GS = "gs://lake/wh"
KEY = {"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com", "private_key_id": "kid",
       "private_key": "-----BEGIN PRIVATE KEY-----\nnot-a-real-key\n-----END PRIVATE KEY-----\n",
       "project_id": "proj"}


def test_settings_take_the_standard_google_variables_and_keep_the_key_out_of_repr():
    import json

    env = {"GOOGLE_SERVICE_ACCOUNT_KEY": json.dumps(KEY), "GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json",
           "STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443"}
    s = from_values({"warehouse": GS + "/", **from_environment(env)})
    assert s.warehouse == GS and s.storage.gcs == GcsOptions(json.dumps(KEY), "/keys/sa.json", "http://127.0.0.1:4443")
    assert "not-a-real-key" not in repr(s) and "kid" not in repr(s)
    assert served_by_environment(s.storage, env)
    assert canonical("GCS://lake/wh/") == GS


def test_a_key_that_is_not_json_is_refused_without_showing_it():
    with pytest.raises(InvalidRequest, match="gcs_service_account_key") as exc:
        Settings.create(GS, gcs_service_account_key="s3cr3t-not-json")
    assert "s3cr3t" not in str(exc.value)


def test_delta_rs_reaches_an_emulator_through_a_key_made_of_its_url():
    """object_store reads an emulator's URL from the key JSON only (gcs_base_url, disable_oauth)."""
    import json

    opts = delta_rs_options(GS, StorageOptions(gcs=GcsOptions(endpoint="127.0.0.1:4443")))
    assert opts["allow_http"] == "true" and sorted(opts) == ["allow_http", "google_service_account_key"]
    key = json.loads(opts["google_service_account_key"])
    assert key["gcs_base_url"] == "http://127.0.0.1:4443" and key["disable_oauth"] is True
    # a real key travels as it is; a key file as its path
    real = delta_rs_options(GS, StorageOptions(gcs=GcsOptions(service_account_key=json.dumps(KEY))))
    assert json.loads(real["google_service_account_key"]) == KEY and "allow_http" not in real
    assert delta_rs_options(GS, StorageOptions(gcs=GcsOptions(credentials_file="/k.json"))) == {
        "google_application_credentials": "/k.json"}
    assert delta_rs_options(GS, StorageOptions()) == {}


def test_a_sail_process_gets_google_variables_object_store_reads():
    environ = {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9", "HOME": "/h"}
    env = sail_environment(StorageOptions(), environ)   # served by the environment: the emulator spelled as a key
    assert '"gcs_base_url": "http://127.0.0.1:9"' in env["GOOGLE_SERVICE_ACCOUNT_KEY"]
    other = sail_environment(StorageOptions(gcs=GcsOptions(credentials_file="/k.json")), environ)
    assert other["GOOGLE_APPLICATION_CREDENTIALS"] == "/k.json" and "STORAGE_EMULATOR_HOST" not in other


def test_spark_gets_the_gcs_connector_settings_per_credential_kind():
    import json

    emulator = gcs_hadoop_conf(GcsOptions(endpoint="http://127.0.0.1:4443"))
    assert emulator["fs.gs.storage.root.url"] == "http://127.0.0.1:4443"
    assert emulator["fs.gs.auth.type"] == "UNAUTHENTICATED"
    # the connector 3.x reads a service account only from a key file; the key is never written to one
    from delta_destination.errors import UnsupportedOperation

    with pytest.raises(UnsupportedOperation, match="gcs_credentials_file") as info:
        gcs_hadoop_conf(GcsOptions(service_account_key=json.dumps(KEY)))
    assert "not-a-real-key" not in str(info.value)
    filed = gcs_hadoop_conf(GcsOptions(credentials_file="/k.json"))
    assert filed["fs.gs.auth.type"] == "SERVICE_ACCOUNT_JSON_KEYFILE" and "fs.gs.storage.root.url" not in filed
    assert gcs_hadoop_conf(GcsOptions())["fs.gs.auth.type"] == "APPLICATION_DEFAULT"
    store = store_for(GS)
    assert store.spark_path(GS + "/t") == GS + "/t" and store.object_store_path(GS) == GS


def test_the_embedded_engine_refuses_gcs_and_auto_sends_it_to_spark():
    from delta_destination.engines.choice import base_choice, embedded_reaches

    assert not embedded_reaches(GS) and "XML API" in store_for(GS).embedded_refusal
    choice = base_choice(Settings.create(GS), True)
    assert choice.engine == "spark" and choice.code == "warehouse_unreachable"


def test_engine_sail_on_gcs_is_refused_before_any_process_starts():
    from delta_destination.engines.pool import EnginePool
    from delta_destination.errors import UnsupportedOperation

    pool = EnginePool()
    try:
        with pytest.raises(UnsupportedOperation, match="does not serve Google Cloud Storage"):
            pool._sail_supervisor(Settings.create(GS, engine="sail"))   # noqa: SLF001
        assert pool.sail_pids() == []
    finally:
        pool.stop()


ACCT_HOST = "acct.dfs.core.windows.net"


def abfs(conf: dict, key: str) -> str:
    return conf[f"{key}.{ACCT_HOST}"]


@pytest.mark.parametrize("location,options,expected", [
    (ABFSS + "/t", AzureOptions(), "abfss://cont@acct.dfs.core.windows.net/wh/t"),
    ("wasbs://cont@acct.blob.core.windows.net/wh", AzureOptions(), ABFSS),
    ("az://cont/wh", AzureOptions(account_name="acct"), ABFSS),
    # an emulator on plain HTTP: abfs:// (ABFS talks HTTPS for abfss:// whatever it is told)
    (ABFSS, AzureOptions(use_emulator=True, emulator_url="http://127.0.0.1:9"), "abfs://cont@acct.dfs.core.windows.net/wh"),
    ("az://cont/wh", AzureOptions(use_emulator=True), "abfs://cont@devstoreaccount1.dfs.core.windows.net/wh"),
])
def test_spark_reaches_every_azure_spelling_through_abfs(location, options, expected):
    """hadoop-azure 3.5.0's WASB driver refuses every call: wasbs:// is handed to Spark as abfss://."""
    assert store_for(location).spark_path(location, StorageOptions(azure=options)) == expected


def test_an_az_url_without_an_account_is_refused_for_spark_without_a_secret():
    with pytest.raises(InvalidRequest, match="azure_account_name"):
        store_for("az://cont/wh").spark_path("az://cont/wh", StorageOptions(azure=AzureOptions(account_key="s3cr3t")))


def test_hadoop_abfs_settings_per_account_for_each_credential():
    store = store_for(ABFSS)
    key = store.hadoop_conf(ABFSS, StorageOptions(azure=AzureOptions(account_key="k3y")))
    assert key == {f"fs.azure.account.auth.type.{ACCT_HOST}": "SharedKey", f"fs.azure.account.key.{ACCT_HOST}": "k3y"}
    sas = store.hadoop_conf(ABFSS, StorageOptions(azure=AzureOptions(sas_token="?sv=1&sig=x")))
    assert abfs(sas, "fs.azure.account.auth.type") == "SAS" and abfs(sas, "fs.azure.sas.fixed.token") == "sv=1&sig=x"
    sp = store.hadoop_conf(ABFSS, StorageOptions(azure=AzureOptions(client_id="cid", client_secret="cs", tenant_id="tid")))
    assert abfs(sp, "fs.azure.account.auth.type") == "OAuth"
    assert abfs(sp, "fs.azure.account.oauth.provider.type") == "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider"
    assert abfs(sp, "fs.azure.account.oauth2.client.endpoint") == "https://login.microsoftonline.com/tid/oauth2/token"
    assert (abfs(sp, "fs.azure.account.oauth2.client.id"), abfs(sp, "fs.azure.account.oauth2.client.secret")) == ("cid", "cs")
    # no credential: nothing, the engine's own Hadoop configuration decides (a cluster's managed identity)
    assert store.hadoop_conf(ABFSS, StorageOptions()) == {}
    assert store.hadoop_conf("az://cont/wh", StorageOptions()) == {}


def test_hadoop_reaches_the_emulator_through_its_blob_endpoint():
    """Azurite has no DFS endpoint: ABFS is pointed at host:port (the account then goes in the
    path, as Azurite addresses accounts), over HTTP, on the Blob endpoint of a flat namespace."""
    options = StorageOptions(azure=AzureOptions(account_name="acct", account_key="k", use_emulator=True,
                                                emulator_url="http://127.0.0.1:10001"))
    conf = store_for(ABFSS).hadoop_conf(ABFSS, options)
    assert conf == {**{f"{k}.{ACCT_HOST}": v for k, v in {
        "fs.azure.abfs.endpoint": "127.0.0.1:10001",
        "fs.azure.account.hns.enabled": "false", "fs.azure.fns.account.service.type": "BLOB",
        "fs.azure.account.auth.type": "SharedKey", "fs.azure.account.key": "k"}.items()},
        # plain HTTP: ABFS reads these without the account suffix
        "fs.azure.always.use.https": "false", "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION"}
    dev = store_for(ABFSS).hadoop_conf("az://c/wh", StorageOptions(azure=AzureOptions(use_emulator=True, emulator_url="http://azurite")))
    assert dev["fs.azure.abfs.endpoint.devstoreaccount1.dfs.core.windows.net"] == "azurite:80"
    assert dev["fs.azure.account.key.devstoreaccount1.dfs.core.windows.net"] == EMULATOR_KEY


def test_hadoop_caches_one_client_per_bucket_or_container():
    options = StorageOptions(azure=AzureOptions(account_name="acct"))
    assert store_for("az://cont/wh").spark_filesystem("az://cont/wh", options) == "cont@acct.dfs.core.windows.net"
    assert store_for("s3://b/wh").spark_filesystem("s3://b/wh", options) == "b"
    assert store_for("/wh").spark_filesystem("/wh", options) == ""


def test_the_local_spark_engine_serves_azure_once_hadoop_azure_is_among_its_jars(tmp_path, monkeypatch):
    from delta_destination.engines.choice import local_spark_reaches

    monkeypatch.setenv("DELTA_DESTINATION_SPARK_JARS", str(tmp_path))
    assert not local_spark_reaches(ABFSS)     # a .spark-jars fetched before hadoop-azure was added
    (tmp_path / "hadoop-azure-3.5.0.jar").write_bytes(b"")
    assert local_spark_reaches(ABFSS) and local_spark_reaches("/wh")


def test_a_store_declares_its_settings_and_the_schema_takes_them_from_it():
    """A store's settings are declared in its module, keyed `<store>_<attribute of its options>`;
    settings.FIELDS gathers them in the table's order and parses them into the store's part of
    Settings.storage."""
    from dataclasses import fields

    from delta_destination.settings import FIELDS
    from delta_destination.storage import STORES

    for store in STORES:
        attributes = {f.name for f in fields(store.options_type)} if store.options_type else set()
        assert {f.key for f in store.fields} == {f"{store.name}_{a}" for a in attributes}
    assert [f for f in FIELDS if f.key.split("_")[0] in ("s3", "azure", "gcs")] == [
        f for store in STORES for f in store.fields]
    s = from_values({"warehouse": "/wh", "s3_path_style": "false", "azure_use_emulator": "true", "gcs_endpoint": "h:1"})
    assert s.storage.s3.path_style is False and s.storage.azure.use_emulator is True and s.storage.gcs.endpoint == "h:1"
    # `auto`: a tri-state flag goes back to automatic, a plain one keeps its value
    again = s.resolve({"s3_path_style": "auto", "azure_use_emulator": "auto"})
    assert again.storage.s3.path_style is None and again.storage.azure.use_emulator is True


@pytest.mark.parametrize("values, words", [
    ({"azure_emulator_url": "127.0.0.1:10000"}, "azure_emulator_url must be an http:// or https:// URL"),
    ({"gcs_endpoint": "ftp://h:1"}, "gcs_endpoint must be an http:// or https:// URL"),
    ({"gcs_service_account_key": "not json"}, "gcs_service_account_key is not a service account key"),
])
def test_each_store_checks_its_own_settings(values, words):
    with pytest.raises(InvalidRequest, match=words):
        Settings.create("/wh", **values)


def test_each_store_says_how_commits_are_safe_there_and_which_delta_log_store_spark_uses(tmp_path):
    """What used to be S3 special cases in the Delta log reader and the Spark engine's start."""
    from delta_destination.engines.spark_process import log_store_conf

    assert store_for("s3a://b/wh/t").commit_options() == {"aws_conditional_put": "etag"}
    assert [store_for(x).commit_options() for x in ("/wh", ABFSS, GS)] == [{}, {}, {}]
    assert log_store_conf(tmp_path) == {}   # the project's log store jar is not installed: Delta's default
    (tmp_path / "delta-destination-storage.jar").write_bytes(b"")
    store_class = "deltadestination.storage.S3ConditionalPutLogStore"
    assert log_store_conf(tmp_path) == {"spark.delta.logStore.s3a.impl": store_class,
                                        "spark.delta.logStore.s3.impl": store_class}
    assert (store_for("s3://b").place_noun, store_for(ABFSS).place_noun, store_for(GS).place_noun) == (
        "bucket", "container", "bucket")


def test_storage_options_hold_one_part_per_store_of_the_table():
    from delta_destination.storage import STORES

    options = StorageOptions(s3=S3Options(region="r"))
    assert [name for name in vars(options)] == [s.name for s in STORES if s.options_type is not None]
    assert options.azure == AzureOptions() and options.s3.region == "r"
    with pytest.raises(TypeError):
        StorageOptions(ftp=object())


def test_core_and_engines_name_no_store():
    """What differs between stores is asked of their `Store` (storage/): no code in core/ or engines/
    names one (docstrings and comments may, as examples)."""
    import ast
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "delta_destination"
    store_word = re.compile(r"(?i)\b(s3[an]?|azure|abfss?|wasbs?|gcs|gs|az)\b|(S3|Azure|Gcs)Options")
    found = []
    for path in sorted([*package.glob("core/**/*.py"), *package.glob("engines/**/*.py")]):
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            text = (node.value if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings else getattr(node, "id", None) or getattr(node, "attr", None))
            if isinstance(text, str) and store_word.search(text.replace("_", " ")):
                found.append(f"{path.relative_to(package)}:{node.lineno}: {text[:60]!r}")
    assert found == []
