"""What users run beside the destination from a checkout (`make install`), and the tests and
benchmarks start too. A top-level package, not part of `delta_destination`: it is never installed
with the destination nor copied into its image, and nothing in the product imports it.

- local_cluster/: a local Spark cluster with object storage and a Hive metastore (`make cluster`,
  `python -m tools.local_cluster start|stop|status`);
- the stores' emulators on loopback, each a process that dies with whoever started it (emulator.py):
  s3_server.py (SeaweedFS: the cluster's store, `python -m tools.s3_server`), azure_server.py
  (Azurite, `make azurite`, `python -m tools.azure_server`), gcs_server.py (fake-gcs-server,
  `make gcs-server`), for trying a warehouse on that store with `make run`.

They may import the package's modules (its process launcher, the Spark engine's paths).
"""
