"""The golden table of canonical dataset URIs (delta_destination/lineage/uris.py): what a table of
a warehouse root is called, for the unit tests (tests/unit/test_lineage_uris.py) and for the check
against Airflow's own normaliser (tests/clients/test_lineage_uris_airflow.py)."""
from __future__ import annotations

ACCT = "acct.dfs.core.windows.net"

# (warehouse root, schema, table, canonical URI, OpenLineage namespace, OpenLineage name, Airflow agrees on the raw location)
GOLDEN = [
    ("/tmp/wh", "sales", "orders", "file:///tmp/wh/sales/orders", "file", "/tmp/wh/sales/orders", True),
    ("/tmp/wh/", "sales", "orders", "file:///tmp/wh/sales/orders", "file", "/tmp/wh/sales/orders", True),
    ("/tmp/my wh", "s p", "a#b?c", "file:///tmp/my%20wh/s=20p/a=23b=3Fc", "file", "/tmp/my%20wh/s=20p/a=23b=3Fc", False),
    ("/tmp/wh", "ventes", "données", "file:///tmp/wh/ventes/donn=C3=A9es", "file", "/tmp/wh/ventes/donn=C3=A9es", False),
    ("/tmp/wh", "s", "100%", "file:///tmp/wh/s/100=25", "file", "/tmp/wh/s/100=25", False),
    ("file:///tmp/wh/", "s", "t", "file:///tmp/wh/s/t", "file", "/tmp/wh/s/t", True),
    ("file://localhost/tmp/wh", "s", "t", "file:///tmp/wh/s/t", "file", "/tmp/wh/s/t", False),
    ("s3://lake/wh", "sales", "orders", "s3://lake/wh/sales/orders", "s3://lake", "wh/sales/orders", True),
    ("S3://lake/wh/", "sales", "orders", "s3://lake/wh/sales/orders", "s3://lake", "wh/sales/orders", True),
    ("s3a://lake/wh", "sales", "orders", "s3://lake/wh/sales/orders", "s3://lake", "wh/sales/orders", False),
    ("s3n://lake", "sales", "orders", "s3://lake/sales/orders", "s3://lake", "sales/orders", False),
    ("s3a://AKIAX:secret@lake/wh", "s", "t", "s3://lake/wh/s/t", "s3://lake", "wh/s/t", False),
    ("s3://AKIAX:secret@lake/wh", "s", "t", "s3://lake/wh/s/t", "s3://lake", "wh/s/t", True),
    ("s3a://user@lake/wh", "s", "t", "s3://lake/wh/s/t", "s3://lake", "wh/s/t", False),
    ("gs://bkt/wh?b=2&a=1#frag", "s", "t", "gs://bkt/wh/s/t", "gs://bkt", "wh/s/t", False),
    ("gcs://bkt/wh", "s", "t", "gs://bkt/wh/s/t", "gs://bkt", "wh/s/t", False),
    ("gs://bkt/deep/er/wh", "s", "t", "gs://bkt/deep/er/wh/s/t", "gs://bkt", "deep/er/wh/s/t", True),
    (f"abfss://cont@{ACCT}/wh", "s", "t", f"abfss://cont@{ACCT}/wh/s/t", f"abfss://cont@{ACCT}", "wh/s/t", True),
    (f"ABFS://cont@{ACCT}/wh", "s", "t", f"abfss://cont@{ACCT}/wh/s/t", f"abfss://cont@{ACCT}", "wh/s/t", False),
    (f"abfss://cont:sas-secret@{ACCT}/wh?sig=xyz", "s", "t", f"abfss://cont@{ACCT}/wh/s/t",
     f"abfss://cont@{ACCT}", "wh/s/t", False),
    ("wasb://cont@acct.blob.core.windows.net/wh", "s", "t", "wasbs://cont@acct.blob.core.windows.net/wh/s/t",
     "wasbs://cont@acct.blob.core.windows.net", "wh/s/t", False),
    ("hdfs://nn:8020/wh", "s", "t", "hdfs://nn:8020/wh/s/t", "hdfs://nn:8020", "wh/s/t", True),
]
IDS = [f"{c[0]}|{c[2]}" for c in GOLDEN]
