"""The pyiceberg FileIO the mirror reads and writes a table's manifests, manifest lists and metadata
JSON with: PyArrowFileIO over the warehouse's store, configured from the same settings the Delta side
uses (each store's `iceberg_io_properties`, storage/*.py), never from this process's environment alone.

Decided: pyarrow's path of a URL is the store's to say (`Store.pyarrow_path`). pyiceberg 0.12's
PyArrowFileIO takes everything after the scheme, which on Azure keeps the account in it
(`container@account.dfs.core.windows.net/path`) and fails (apache/iceberg-python#2698; fixed upstream
by #3884, after 0.12). The locations in the metadata stay the full URLs every Iceberg reader resolves
(on Azure `abfss://container@account.dfs.core.windows.net/...`: Java's ADLSFileIO, Spark, Trino,
pyiceberg with adlfs or with that fix).
"""
from __future__ import annotations

from urllib.parse import urlparse

from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

from ...storage import is_url, store_for
from ...warehouse import Warehouse


class StoreFileIO(PyArrowFileIO):
    """PyArrowFileIO whose pyarrow paths are each store's own (see the module docstring)."""

    @staticmethod
    def parse_location(location: str, properties=None) -> tuple[str, str, str]:
        """
        >>> StoreFileIO.parse_location("abfss://c@a.dfs.core.windows.net/wh/t/metadata/v1.metadata.json")
        ('abfss', 'c@a.dfs.core.windows.net', 'c/wh/t/metadata/v1.metadata.json')
        >>> StoreFileIO.parse_location("s3://b/wh/x.avro")
        ('s3', 'b', 'b/wh/x.avro')
        """
        if not is_url(location):
            return PyArrowFileIO.parse_location(location, properties or {})
        uri = urlparse(location)
        return uri.scheme, uri.netloc, store_for(location).pyarrow_path(location)


def file_io(warehouse: Warehouse, location: str) -> FileIO:
    """The FileIO of a table at `location` in this warehouse (a local one: plain paths)."""
    if warehouse.is_local:
        return PyArrowFileIO()
    return StoreFileIO(store_for(location).iceberg_io_properties(location, warehouse.options))
