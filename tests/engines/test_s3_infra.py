"""Object storage infrastructure, against a real S3 server (SeaweedFS, from
tools/s3_server.py): the server itself, Apache Spark + Delta on s3a:// (the jars
`make install` fetches), embedded Sail on s3://, delta-rs as the independent reader, and commits on
S3 that two writers cannot lose (the project's S3ConditionalPutLogStore, built from jvm/src).

One SeaweedFS for the session, one Spark JVM and one embedded Sail for this module.
"""
from __future__ import annotations

import os
import stat
import threading
import uuid

import psutil
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from tools.s3_server import S3Server, grpc_socket

# The Spark settings for S3 that are not credentials (those reach S3A through the JVM's
# environment, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never its command line).
# Endpoint and region come from AWS_ENDPOINT_URL / AWS_REGION in the same environment; a
# deployment can set them here instead (fs.s3a.endpoint, fs.s3a.endpoint.region).
SPARK_S3_CONF = {
    # An IP endpoint has no virtual-host names for buckets.
    "spark.hadoop.fs.s3a.path.style.access": "true",
    # s3:// as well as s3a:// through S3A (Delta picks its log store by scheme).
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    # Commits with put-if-absent: safe for several writers (jvm/src, built by `make install`).
    "spark.delta.logStore.s3a.impl": "deltadestination.storage.S3ConditionalPutLogStore",
    "spark.delta.logStore.s3.impl": "deltadestination.storage.S3ConditionalPutLogStore",
}


@pytest.fixture(scope="module")
def s3_env(s3_server):
    """The engines of this module read the standard AWS variables: the Sail engine process and the
    Spark JVM as their inherited environment (readable by their owner only)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in s3_server.env().items():
            mp.setenv(k, v)
        yield s3_server


@pytest.fixture(scope="module")
def spark(s3_env):
    from delta_destination.engines.pool import connect
    from delta_destination.engines.spark_process import LocalSparkServer, SparkProcessOptions

    engine = LocalSparkServer(SparkProcessOptions(extra_conf=tuple(SPARK_S3_CONF.items())))
    try:
        session = connect(engine.url, {})
        yield session
        session.stop()
    finally:
        engine.stop()


@pytest.fixture(scope="module")
def sail(s3_env):
    from delta_destination.engines.sail import SailProcess, sail_environment
    from delta_destination.engines.pool import connect
    from delta_destination.storage import StorageOptions

    engine = SailProcess(sail_environment(StorageOptions()))
    try:
        session = connect(engine.url, {})
        yield session
        session.stop()
    finally:
        engine.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_back(s3: S3Server, key: str) -> pa.Table:
    """The table as delta-rs sees it, through storage options (not the environment)."""
    dt = DeltaTable(s3.url(key), storage_options=s3.storage_options())
    return pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t ORDER BY id").read_all())


# ---- the server ----------------------------------------------------------------------------

def test_server_is_loopback_private_and_enforces_put_if_absent(s3_server):
    s3 = s3_server
    assert s3.alive() and s3.endpoint_url.startswith("http://127.0.0.1:")
    listening = [c.laddr for c in psutil.Process(s3.pid).net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert listening and all(a.ip == "127.0.0.1" for a in listening), listening
    assert sorted(a.port for a in listening) == sorted(s3.ports.values())
    # The secret is in a private file only, never on the command line.
    assert s3.secret_access_key not in " ".join(psutil.Process(s3.pid).cmdline())
    assert stat.S_IMODE(os.stat(s3.data_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(s3.data_dir / "s3.json").st_mode) == 0o600
    assert s3.secret_access_key not in s3.log_tail(1 << 20)

    client, prefix = s3.client(), unique("server")
    client.put_object(Bucket=s3.bucket, Key=f"{prefix}/a/b", Body=b"1", IfNoneMatch="*")
    with pytest.raises(client.exceptions.ClientError) as refused:
        client.put_object(Bucket=s3.bucket, Key=f"{prefix}/a/b", Body=b"2", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    client.put_object(Bucket=s3.bucket, Key=f"{prefix}/c", Body=b"3")
    assert s3.list_keys(prefix + "/") == [f"{prefix}/a/b", f"{prefix}/c"]
    assert client.get_object(Bucket=s3.bucket, Key=f"{prefix}/a/b")["Body"].read() == b"1"

    other = unique("other")
    s3.create_bucket(other)
    client.put_object(Bucket=other, Key="x", Body=b"")
    assert s3.list_keys(bucket=other) == ["x"]
    assert s3.url("wh/t", bucket=other) == f"s3://{other}/wh/t"

    assert s3.delete_prefix(prefix + "/") == 2
    assert s3.list_keys(prefix) == []  # no directory markers left behind either


def test_server_stop_leaves_nothing_behind(tmp_path):
    with S3Server(startup_timeout=90) as s3:
        pid, data_dir, ports = s3.pid, s3.data_dir, s3.ports
        assert s3.list_keys() == []
        sockets = [grpc_socket(name[: -len("_grpc")], port) for name, port in ports.items() if name.endswith("_grpc")]
        assert any(p.exists() for p in sockets)  # SeaweedFS makes them in /tmp whatever TMPDIR says
    assert not os.path.exists(f"/proc/{pid}")
    assert not data_dir.exists()
    assert not any(p.exists() for p in sockets)


# ---- the engines -----------------------------------------------------------------------------

def test_spark_writes_delta_on_s3a_that_delta_rs_reads(spark, s3_env):
    s3, key = s3_env, unique("spark") + "/t"
    loc = f"s3a://{s3.bucket}/{key}"
    spark.sql(f"CREATE TABLE delta.`{loc}` (id BIGINT, v STRING) USING delta")
    spark.sql(f"INSERT INTO delta.`{loc}` VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"""MERGE INTO delta.`{loc}` t USING (SELECT 2 AS id, 'B' AS v UNION ALL SELECT 3, 'c') s
                  ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *""")
    expected = [(1, "a"), (2, "B"), (3, "c")]
    assert [tuple(r) for r in spark.sql(f"SELECT id, v FROM delta.`{loc}` ORDER BY id").collect()] == expected
    got = read_back(s3, key)
    assert list(zip(got["id"].to_pylist(), got["v"].to_pylist())) == expected
    assert DeltaTable(s3.url(key), storage_options=s3.storage_options()).version() == 2
    assert any(k.endswith("_delta_log/00000000000000000002.json") for k in s3.list_keys(key + "/"))


def test_sail_writes_delta_on_s3_that_delta_rs_reads(sail, s3_env):
    s3, key = s3_env, unique("sail") + "/t"
    loc, name = s3.url(key), key.split("/")[0].replace("-", "_")
    # Sail takes a table by LOCATION, not as delta.`path` (engines/dialect.py).
    sail.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING delta LOCATION '{loc}'")
    sail.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").mode("append").save(loc)
    sail.createDataFrame([(2, "B"), (3, "c")], "id long, v string").createOrReplaceTempView("changes")
    sail.sql(f"""MERGE INTO {name} t USING changes s ON t.id = s.id
                 WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *""")
    expected = [(1, "a"), (2, "B"), (3, "c")]
    assert sorted(tuple(r) for r in sail.read.format("delta").load(loc).collect()) == expected
    got = read_back(s3, key)
    assert list(zip(got["id"].to_pylist(), got["v"].to_pylist())) == expected


# ---- two writers, one table ----------------------------------------------------------------

def test_concurrent_writers_on_s3_lose_no_commit(spark, s3_env):
    """Spark (S3ConditionalPutLogStore) appends while delta-rs appends to the same table about
    once a second. Both commit with put-if-absent, so every append that returned is in the
    table and each version holds one commit. A Spark append whose read snapshot went stale
    while it wrote its data files lost the race for its first version: the store answered 412,
    the log store raised FileAlreadyExistsException and Delta committed at a later version
    (commitInfo.readVersion + 1 < version). Our log store does no existence probe before the
    PUT, so the 412 is the only way such a retry can happen; the test runs until it has."""
    s3, key = s3_env, unique("writers") + "/t"
    url = s3.url(key)
    write_deltalake(url, pa.table({"w": ["init"], "i": [0]}), storage_options=s3.storage_options())
    spark_ok, rs_ok, errors = [], [], []
    spark_done = threading.Event()

    def spark_appends():
        try:
            for i in range(10):
                spark.createDataFrame([("spark", i)], "w string, i long").write.format("delta") \
                    .mode("append").save(f"s3a://{s3.bucket}/{key}")
                spark_ok.append(i)
                if i >= 2 and retried_spark_commits(s3, key):
                    return
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            spark_done.set()

    def delta_rs_appends():
        i = 0
        while not spark_done.wait(0.5):
            try:
                write_deltalake(url, pa.table({"w": ["rs"], "i": [i]}), mode="append",
                                storage_options=s3.storage_options())
                rs_ok.append(i)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
            i += 1

    threads = [threading.Thread(target=spark_appends), threading.Thread(target=delta_rs_appends)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    dt = DeltaTable(url, storage_options=s3.storage_options())
    got = pa.table(QueryBuilder().register("t", dt).execute("SELECT w, i FROM t").read_all()).to_pylist()
    assert sorted(r["i"] for r in got if r["w"] == "spark") == sorted(spark_ok)
    assert sorted(r["i"] for r in got if r["w"] == "rs") == sorted(rs_ok)
    assert dt.version() == len(spark_ok) + len(rs_ok)  # one version per commit, none overwritten
    assert retried_spark_commits(s3, key) >= 1, "no Spark commit lost a race: the conflict path was not exercised"


def retried_spark_commits(s3: S3Server, key: str) -> int:
    """Spark commits written past their read version + 1: each found its first version taken."""
    dt = DeltaTable(s3.url(key), storage_options=s3.storage_options())
    return sum(1 for c in dt.history()
               if c.get("engineInfo", "").startswith("Apache-Spark") and c.get("readVersion") is not None
               and c["version"] > c["readVersion"] + 1)


# ---- the jar set -----------------------------------------------------------------------------

def test_s3a_jars_match_pysparks_hadoop_and_duplicate_none_of_its_classes():
    """hadoop-aws and hadoop-azure must be exactly pyspark's Hadoop release, and nothing `make install` fetched
    may carry a class pyspark already ships (no second Hadoop, Jackson, Netty, HttpClient)."""
    import zipfile

    from delta_destination.engines import spark_process as sp

    pyspark_jars = sp.spark_home() / "jars"
    hadoop = next(pyspark_jars.glob("hadoop-client-api-*.jar")).name[len("hadoop-client-api-"):-len(".jar")]
    ours = sp.delta_jars()
    names = {j.name for j in ours}
    assert f"hadoop-aws-{hadoop}.jar" in names
    assert f"hadoop-azure-{hadoop}.jar" in names   # ABFS, Azure on the Spark engine (same release)
    assert "delta-destination-storage.jar" in names
    assert not any(n.startswith(("hadoop-client", "jackson-", "netty-common", "netty-buffer", "netty-codec",
                                       "netty-transport", "netty-handler", "httpclient", "httpcore", "slf4j")) for n in names)

    def classes(jar):
        with zipfile.ZipFile(jar) as z:
            return {n for n in z.namelist() if n.endswith(".class") and not n.startswith("META-INF/")}

    shipped = set().union(*(classes(j) for j in pyspark_jars.glob("*.jar")))
    seen: dict[str, str] = {}
    for jar in ours:
        for c in classes(jar):
            assert c not in shipped, f"{jar.name} duplicates pyspark's {c}"
            assert seen.setdefault(c, jar.name) == jar.name, f"{c} in {jar.name} and {seen[c]}"


def test_a_removed_table_leaves_no_folder_that_looks_like_a_table(s3_server):
    """SeaweedFS keeps emptied folders and lists them as common prefixes; Delta on Spark then
    finds `<table>/_delta_log` and refuses to create a table where one was dropped (seen as
    TABLE_OR_VIEW_ALREADY_EXISTS after a drop migration). Removing a tree removes its folders too,
    and nothing beside it."""
    from delta_destination.storage import S3Options, StorageOptions, s3_client, storage_for

    opts = StorageOptions(s3=S3Options(endpoint=s3_server.endpoint_url, region=s3_server.region,
                                       access_key_id=s3_server.access_key_id,
                                       secret_access_key=s3_server.secret_access_key))
    client, bucket = s3_client(opts), s3_server.bucket
    base = f"rm-{uuid.uuid4().hex[:8]}"
    for key in ["t/_delta_log/00000000000000000000.json", "t/_delta_log/_staged_commits/", "t/part-0.parquet",
                "t/a/b/part-1.parquet", "keep/x"]:
        client.put_object(Bucket=bucket, Key=f"{base}/{key}", Body=b"1")
    storage_for(f"s3://{bucket}/{base}", opts).delete_table_files(f"s3://{bucket}/{base}/t")

    def listed(prefix):
        page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
        return [p["Prefix"] for p in page.get("CommonPrefixes", ())], [o["Key"] for o in page.get("Contents", ())]

    assert listed(f"{base}/t/") == ([], [])
    assert listed(f"{base}/") == ([f"{base}/keep/"], [])
