#!/usr/bin/env bash
# A test-only environment holding Apache Iceberg's own Java reader, so tests/clients/test_iceberg_java_reader.py
# can read the Iceberg metadata the destination writes (setting iceberg=metadata) the way Spark with Iceberg
# does, not only with pyiceberg. Created once into ./.iceberg-reader (ignored by git) and reused while its stamp
# matches:
#
#   venv/                   Python with pyspark 4.0.x: Iceberg's Spark runtime 1.10.0 supports Spark 4.0 only
#                           (the project's .venv has pyspark 4.2, which must never load it); pyarrow (the
#                           project's pin) for DataFrame.toArrow, so the reads come back as Arrow IPC files
#   jars/                   org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.0 from Maven Central (one
#                           shaded jar; mvn dependency:copy, no pom needed), and org.xerial:sqlite-jdbc for
#                           Iceberg's JdbcCatalog over the SQL catalog (setting iceberg_catalog_uri=sqlite:...)
#
# The reader program is testkit/iceberg_java_read.py, run as a subprocess with venv/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
DIR=${ICEBERG_READER_DIR:-.iceberg-reader}
PYSPARK=4.0.5
PYARROW=26.0.1
RUNTIME=org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.0
SQLITE_JDBC=org.xerial:sqlite-jdbc:3.51.1.0
SPEC="pyspark==$PYSPARK pyarrow==$PYARROW $RUNTIME $SQLITE_JDBC"
if [ -f "$DIR/.stamp" ] && [ "$(cat "$DIR/.stamp")" = "$SPEC" ]; then
  exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "need Maven (mvn) and Java 17+ for Iceberg's Spark runtime jar"; exit 1; }
rm -rf "$DIR"
"$PYTHON" -m venv "$DIR/venv"
"$DIR/venv/bin/pip" install -q --upgrade pip
"$DIR/venv/bin/pip" install -q "pyspark==$PYSPARK" "pyarrow==$PYARROW"
mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy -Dartifact="$RUNTIME" \
  -DoutputDirectory="$DIR/jars"
mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy -Dartifact="$SQLITE_JDBC" \
  -DoutputDirectory="$DIR/jars"
ls "$DIR"/jars/iceberg-spark-runtime-*.jar "$DIR"/jars/sqlite-jdbc-*.jar >/dev/null
echo "$SPEC" > "$DIR/.stamp"
