"""WriteBatch / WriteHistoryBatch requests with their batch files, written the way Fivetran writes them:
each request its own random NULL and unmodified markers, each file its own AES key (unless plain
text), compressed, the CSV header in a shuffled column order (testkit/batch_files.py writes the bytes).

What goes into the files (the tester format leaves it open; the destination's semantics decide):

* Replace (upsert) files carry every column of the table; columns a row does not give are NULL
  (an upsert replaces the whole row).
* Update files carry every column; columns a row does not give are the unmodified marker.
* Delete files carry every column, NULL but the key and ``_fivetran_synced`` (live tables), or the
  key + ``_fivetran_end`` (history tables); earliest-start files the key + ``_fivetran_start``.
"""
from __future__ import annotations

import hashlib
import random
from pathlib import Path

from delta_destination.core.model import END, START, TableSchema
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression, FileFormat
from delta_destination.doors.fivetran.convert import table_to_proto
from testkit import batch_files
from .reference_model import ModelTable
from .values import file_value


class BatchWriter:
    """Writes one run's batch files into `directory`; `rng` (seeded) picks markers and header orders."""

    def __init__(self, directory: Path, rng: random.Random, *, compression: Compression, plain_text: bool,
                 file_format: FileFormat):
        self.directory = directory
        self.rng = rng
        self.compression = compression
        self.plain_text = plain_text
        self.file_format = file_format
        self.files_written = 0

    def batch_request(self, t: ModelTable, schema: str, configuration: dict, *, replace=(), update=(),
                      delete=()) -> pb.WriteBatchRequest:
        """A WriteBatchRequest whose files hold these rows (dicts of normalised values)."""
        cols = t.schema.column_names
        return self._request(pb.WriteBatchRequest, t, schema, configuration, [
            ("replace", cols, replace, "replace_files"),
            ("update", cols, update, "update_files"),
            ("delete", cols, delete, "delete_files")])

    def history_batch_request(self, t: ModelTable, schema: str, configuration: dict, *, earliest=(), replace=(),
                              update=(), delete=()) -> pb.WriteHistoryBatchRequest:
        """A WriteHistoryBatchRequest, its files in the order the SDK applies them."""
        cols, key = t.schema.column_names, t.business_key
        return self._request(pb.WriteHistoryBatchRequest, t, schema, configuration, [
            ("earliest", key + [START], earliest, "earliest_start_files"),
            ("update", cols, update, "update_files"),
            ("replace", cols, replace, "replace_files"),
            ("delete", key + [END], delete, "delete_files")])

    def _request(self, request_type, t: ModelTable, schema: str, configuration: dict, files: list):
        null_string, unmodified_string = self._marker("null"), self._marker("unmodified")
        req = request_type(configuration=configuration, schema_name=schema, table=table_to_proto(t.schema),
                           file_params=self._file_params(null_string, unmodified_string))
        keys = {}
        for kind, header, rows, field in files:
            if rows:
                path, keys[path] = self._write_file(t, kind, header, list(rows), null_string, unmodified_string)
                getattr(req, field).append(path)
        for path, key in keys.items():
            if key is not None:
                req.keys[path] = key
        return req

    def _marker(self, kind: str) -> str:
        return f"{kind}-{self.rng.getrandbits(64):016x}"

    def _file_params(self, null_string: str, unmodified_string: str) -> pb.FileParams:
        return pb.FileParams(compression=int(self.compression),
                             encryption=pb.Encryption.NONE if self.plain_text else pb.Encryption.AES,
                             null_string=null_string, unmodified_string=unmodified_string)

    def _file_name(self, table: str, kind: str) -> str:
        ext = ".parquet" if self.file_format == FileFormat.PARQUET else ".csv"
        if self.file_format != FileFormat.PARQUET:
            ext += {Compression.ZSTD: ".zst", Compression.GZIP: ".gz"}.get(self.compression, "")
        if not self.plain_text:
            ext += ".aes"
        # the table's name may be long or hold any character: keep it out of the file name
        return f"{self.files_written:04d}_{hashlib.sha1(table.encode()).hexdigest()[:12]}_{kind}{ext}"

    @staticmethod
    def _cells(t: ModelTable, kind: str, header: list[str], row: dict) -> list:
        cells = []
        for c in header:
            v = row.get(c, batch_files.UNMODIFIED) if kind == "update" else row.get(c)
            if v is batch_files.UNMODIFIED or v is batch_files.NULL:
                cells.append(v)
            elif v is None:
                cells.append(batch_files.NULL)
            else:
                cells.append(file_value(t.schema.get(c), v))
        return cells

    def _write_file(self, t: ModelTable, kind: str, header: list[str], rows: list[dict], null_string: str,
                    unmodified_string: str) -> tuple[str, bytes | None]:
        """One batch file; returns its path and its AES key (None in plain text)."""
        self.files_written += 1
        header = list(header)
        self.rng.shuffle(header)
        path = str(self.directory / self._file_name(t.schema.name, kind))
        key = None if self.plain_text else batch_files.new_key()
        batch_files.write_batch_file(path, header, [self._cells(t, kind, header, r) for r in rows], key=key,
                                     compression=self.compression, null_string=null_string,
                                     unmodified_string=unmodified_string, file_format=self.file_format,
                                     table=TableSchema(t.schema.name, tuple(t.schema.get(c) for c in header)))
        return path, key
