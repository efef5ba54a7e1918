"""Every table readable as Apache Iceberg too (setting `iceberg`, docs/iceberg.md): Iceberg
metadata in the table's own `metadata/` folder, one snapshot per Delta version over the same
Parquet files. schemas.py maps Delta schemas (stable field ids), plan.py turns Delta commits into
snapshots, data_files.py Delta add actions into Iceberg data files, metadata_files.py commits the
metadata files, mirror.py runs them, after_commit.py is what the table registry calls."""
