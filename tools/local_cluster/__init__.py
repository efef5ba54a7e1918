"""A local Spark cluster with object storage and a catalog, for `make cluster` and the cluster tests.

What runs, every process bound to 127.0.0.1 on ports picked free at start:
- a Spark standalone master and `workers` workers (separate JVMs, from the pinned pyspark's own
  jars through `bin/spark-class`; `pyspark/sbin` has no start scripts), each worker with one core,
  a bounded memory to hand to executors and its own work and scratch directories;
- a Spark Connect server (`spark-submit`, as the local engine starts it) whose application runs
  on that master: one executor per worker, the Delta jars of `.spark-jars/` (and S3A's when
  present), Spark's Hive support pointed at the metastore below;
- the S3 server of the object-storage work (SeaweedFS, tools/s3_server.py) when it and the
  S3A jars are installed, else a warehouse on a local directory all processes share;
- a Hive standalone metastore 4.0.1 (Maven Central, `.metastore-jars/`) with an embedded Derby
  database whose schema DataNucleus creates at the first start (`datanucleus.schema.autoCreateAll`).

Why Spark's Hive client is Hive 4.0.1 and not pyspark's built-in 2.3.10: a Hive 4 metastore no
longer answers the Thrift calls the 2.3 client makes for tables (measured: CREATE/SHOW DATABASES
work, every table lookup fails with "Invalid method name: 'get_table'"). Spark 4.2 supports
4.0.0-4.1.0 clients in an isolated class loader; `.hive-client-jars/` holds the artifacts Spark
itself would resolve for 4.0.1 (jvm/hive-client/pom.xml), so nothing is downloaded at start-up.

Each run starts fresh: the state directory (default `.cluster/`, private to its owner) is
emptied first, because the S3 server's data and the Derby database live only as long as the
cluster. `.cluster/env` (0600) holds the connection facts as shell assignments, `.cluster/pids`
every process started, by name. `python -m tools.local_cluster start|stop|status`
is what the Makefile calls: `start` leaves a supervisor process behind that owns the cluster (the S3 server
and the JVMs die with it, PR_SET_PDEATHSIG), `stop` stops every recorded PID (TERM, then KILL,
a whole process group each: the workers' executors included) and checks that none is left.
The tests use `LocalCluster` directly in their own process.

The parts: config.py (sizes, jars, the files and settings each process gets; pure), cluster.py
(LocalCluster: start, readiness, stop, what clients need), metastore.py (LocalMetastore: the
metastore alone, for tests that speak Thrift to it themselves), processes.py (process groups, trees and
their memory), supervisor.py (`start`/`stop`/`status` through the state directory) and __main__.py
(the command line).
"""
from __future__ import annotations

from .cluster import LocalCluster, Part, another_session_sees, completed_tasks_by_executor, http_json
from .config import BUCKET, DEFAULT_STATE_DIR, WAREHOUSE_PREFIX, ClusterError, ClusterOptions
from .processes import processes_mentioning, running, stop_group, tree_rss
from .supervisor import read_env, read_pids, running_pids

__all__ = ["BUCKET", "DEFAULT_STATE_DIR", "WAREHOUSE_PREFIX", "ClusterError", "ClusterOptions", "LocalCluster", "Part",
           "another_session_sees", "completed_tasks_by_executor", "http_json", "processes_mentioning", "read_env",
           "read_pids", "running", "running_pids", "stop_group", "tree_rss"]
