"""Read Iceberg tables with Apache Iceberg's own Java library: Spark 4.0 with iceberg-spark-runtime 1.10.0,
in the test-only environment scripts/iceberg_java_reader_env.sh builds (./.iceberg-reader).

Run by that environment's Python, never imported: it must not import the project's package, and the
project's own pyspark (4.2) must never load Iceberg's runtime. tests/clients/test_iceberg_java_reader.py
starts it through `read_with_java` below (the only part that runs in the project's venv).

Request (JSON on stdin): {"out": <folder>, "tables": [{"path": <table folder>, "all_snapshots": bool,
"options": {<Iceberg read option>: <value>}}], "catalogs": {<name>: {"type": "jdbc", "uri": <JDBC URL>}}}
("options" optional, e.g. {"vectorization-enabled": "false"}; "catalogs" optional: a table given as
{"catalog": <name>, "identifier": [<namespace>, <table>]} instead of "path" is loaded by name from
that Iceberg catalog, e.g. Iceberg's JdbcCatalog over the SQL catalog the destination keeps).
One local Spark session reads them all (one JVM per call). For each table, Iceberg's HadoopTables
opens it by path (its metadata/version-hint.text), or its catalog by name, and lists its snapshots
with their summaries; Spark reads the current snapshot with `spark.read.format("iceberg").load(...)`
and, with all_snapshots, each snapshot with option "snapshot-id". Each read is written as an Arrow IPC file into <out>.
Answer (the last line of stdout, JSON): per table its Iceberg schema as Iceberg's SchemaParser writes
it, the current snapshot id, the snapshots (id, summary), and the reads ({snapshot_id, file, spark_schema}, or
{snapshot_id, error} when Spark failed to read it: the Java exception's class and message, so one failed read
does not hide the others).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

READER_DIR = ".iceberg-reader"


def _snapshots(jtable) -> list[dict]:
    out, it = [], jtable.snapshots().iterator()
    while it.hasNext():
        s = it.next()
        out.append({"snapshot_id": s.snapshotId(), "parent_id": s.parentId(), "operation": s.operation(),
                    "summary": {str(k): str(v) for k, v in dict(s.summary()).items()}})
    return out


def main() -> None:
    import pyarrow as pa
    from py4j.protocol import Py4JJavaError
    from pyspark.sql import SparkSession

    request = json.loads(sys.stdin.read())
    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    jars = sorted((Path(__file__).resolve().parents[1] / READER_DIR / "jars").glob("*.jar"))
    builder = SparkSession.builder
    for name, c in request.get("catalogs", {}).items():
        builder = (builder.config(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
                   .config(f"spark.sql.catalog.{name}.type", c["type"])
                   .config(f"spark.sql.catalog.{name}.uri", c["uri"])
                   .config(f"spark.sql.catalog.{name}.warehouse", str(out / "catalog-warehouse")))
    spark = (builder.master("local[1]").appName("iceberg-java-reader")
             .config("spark.jars", ",".join(str(j) for j in jars))
             .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    tables = jvm.org.apache.iceberg.hadoop.HadoopTables(spark.sparkContext._jsc.hadoopConfiguration())
    answer = []
    for n, t in enumerate(request["tables"]):
        if "catalog" in t:
            path = ".".join([t["catalog"]] + [f"`{part}`" for part in t["identifier"]])
            jtable = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, path)
        else:
            path = t["path"]
            jtable = tables.load(path)
        current = jtable.currentSnapshot()
        entry = {"path": path, "metadata_location": jtable.operations().current().metadataFileLocation(),
                 "schema": json.loads(jvm.org.apache.iceberg.SchemaParser.toJson(jtable.schema())),
                 "current_snapshot_id": current.snapshotId() if current is not None else None,
                 "snapshots": _snapshots(jtable), "reads": []}
        wanted = [None] + ([s["snapshot_id"] for s in entry["snapshots"]] if t.get("all_snapshots") else [])
        for m, snapshot_id in enumerate(wanted):
            reader = spark.read.format("iceberg").options(**t.get("options", {}))
            if snapshot_id is not None:
                reader = reader.option("snapshot-id", str(snapshot_id))
            df = reader.load(path)
            file = out / f"t{n}-r{m}.arrow"
            try:
                data = df.toArrow()
            except Py4JJavaError as e:
                cause = e.java_exception
                while cause.getCause() is not None:
                    cause = cause.getCause()
                entry["reads"].append({"snapshot_id": snapshot_id, "error": f"{cause.getClass().getName()}: {cause.getMessage()}"})
                continue
            with pa.OSFile(str(file), "wb") as f, pa.ipc.new_file(f, data.schema) as w:
                w.write_table(data)
            entry["reads"].append({"snapshot_id": snapshot_id, "file": str(file),
                                   "spark_schema": json.loads(df.schema.json())})
        answer.append(entry)
    spark.stop()
    print(json.dumps(answer))


def read_with_java(tables: list[dict], out: Path, root: Path, timeout: float = 600,
                   catalogs: dict | None = None) -> list[dict]:
    """Runs this program in the reader environment under `root` (the checkout) and returns its answer.
    The child gets none of the test process's Spark or Python settings (SPARK_HOME, PYSPARK_*,
    PYTHONPATH), so the environment's pyspark 4.0 is the only Spark it can load."""
    python = root / READER_DIR / "venv" / "bin" / "python"
    out.mkdir(parents=True, exist_ok=True)  # also the child's working folder (Spark's spark-warehouse/, derby.log)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_", "PYTHON")) and k not in ("VIRTUAL_ENV", "CLASSPATH")}
    proc = subprocess.run([str(python), str(Path(__file__).resolve())], input=json.dumps({"out": str(out), "tables": tables, "catalogs": catalogs or {}}),
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=str(out))
    if proc.returncode != 0:
        raise RuntimeError(f"the Java Iceberg reader failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
