"""Tools a user runs beside the destination, from a checkout with the dev dependencies installed
(`make install`):

- local_cluster/: a local Spark cluster with object storage and a Hive metastore (`make cluster`,
  `python -m delta_destination.tools.local_cluster start|stop|status`);
- s3_server.py: a real S3 server on loopback (SeaweedFS), for the cluster, the tests, the benchmark
  and manual runs (`python -m delta_destination.tools.s3_server`).

They may import the package's modules; nothing in core/, engines/ or doors/ imports them.
"""
