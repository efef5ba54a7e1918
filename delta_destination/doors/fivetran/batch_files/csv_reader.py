"""CSV batch files: the plaintext stream parsed by Arrow's streaming CSV reader (every
column as text), then converted per column. Never held whole in memory.

- A UTF-8 BOM at the very start of a file is stripped.
- An empty `unmodified_string` disables unmodified markers (proto3 cannot tell
  "unset" from "", and treating every empty cell as unmodified would silently
  drop updates); an empty `null_string` is honoured (empty cells are NULL).  If
  both markers are equal, NULL wins.
"""
from __future__ import annotations

import io
import os
import re

import pyarrow as pa
import pyarrow.csv as pcsv

from ....errors import SchemaMismatch, ValueConversionError
from ....core.model import TableSchema
from . import errors
from .cells import CellConverter
from .params import BatchData, FileParams
from .streams import CHUNK, BufferedRaw, open_plaintext

CSV_BLOCK = 16 << 20

_BOM = b"\xef\xbb\xbf"


class _CsvSource(BufferedRaw):
    """The plaintext as pyarrow sees it.

    Strips a leading BOM, ends the file with a newline if it lacks one (so a
    header-only file without a final newline still parses), and counts quote
    characters: pyarrow accepts an unterminated quote silently (the value runs
    to EOF), but in a well-formed file quotes come in pairs.
    """

    def __init__(self, src, name: str):
        super().__init__()
        self._src = src
        self._first = True
        self._last = b"\n"
        self.quotes = 0
        self.at_eof = False
        first = self._produce()
        if not first:
            raise errors.CsvFormatError(f"file {name}: empty file: no header")
        self._out = first

    def _produce(self) -> bytes:
        if self.at_eof:
            return b""
        data = self._src.read(CHUNK)
        if self._first:
            self._first = False
            if data.startswith(_BOM):
                data = data[len(_BOM):]
                if not data:
                    data = self._src.read(CHUNK)
        if not data:
            self.at_eof = True
            return b"\n" if self._last not in (b"\n", b"\r") else b""
        self.quotes += data.count(b'"')
        self._last = data[-1:]
        return data

    def close(self):
        if not self.closed:
            self._src.close()
        super().close()


_FIELDS_RE = re.compile(r"Expected (\d+) columns, got (\d+)")


def _csv_error(name: str, exc: Exception) -> errors.CsvFormatError:
    """Classify a pyarrow CSV error without quoting it (its text can contain row contents)."""
    msg = str(exc)
    m = _FIELDS_RE.search(msg)
    if m:
        what = f"wrong number of fields (expected {m.group(1)}, got {m.group(2)})"
    elif "UTF8" in msg or "UTF-8" in msg:
        what = "invalid UTF-8"
    elif "Empty CSV" in msg:
        what = "empty file: no header"
    elif "straddl" in msg:
        what = f"a row longer than the {CSV_BLOCK >> 20} MiB parse block"
    else:
        what = "unreadable CSV"
    return errors.CsvFormatError(f"malformed CSV in file {name}: {what}")


def _unterminated(name: str) -> errors.CsvFormatError:
    return errors.CsvFormatError(f"malformed CSV in file {name}: unterminated quote")


def check_header(name: str, header: list[str], table: TableSchema, what: str = "CSV") -> None:
    if any(h == "" for h in header):
        raise errors.CsvFormatError(f"malformed {what} in file {name}: empty column name in header")
    seen = set()
    for h in header:
        if h in seen:
            raise errors.CsvFormatError(f"malformed {what} in file {name}: duplicate column {h!r} in header")
        seen.add(h)
    for h in header:
        if not table.has(h):
            raise SchemaMismatch(f"file {name}: column {h!r} is not in table {table.name!r}")


def read_csv(path: str, key, params: FileParams, table: TableSchema, allow_unmodified: bool) -> BatchData:
    name = os.path.basename(path)
    plain = open_plaintext(path, key, params)
    try:
        src = _CsvSource(plain, name)
        stream = io.BufferedReader(src, CHUNK)
        try:
            reader = pcsv.open_csv(
                stream,
                read_options=pcsv.ReadOptions(block_size=CSV_BLOCK, use_threads=True),
                parse_options=pcsv.ParseOptions(
                    delimiter=",", quote_char='"', double_quote=True, escape_char=False,
                    newlines_in_values=True, ignore_empty_lines=True),
                convert_options=pcsv.ConvertOptions(
                    column_types={c.name: pa.string() for c in table.columns},
                    strings_can_be_null=False, quoted_strings_can_be_null=False,
                    null_values=[], check_utf8=True),
            )
            header = reader.schema.names
        except pa.ArrowInvalid as e:
            if src.at_eof and src.quotes % 2:
                raise _unterminated(name) from None
            raise _csv_error(name, e) from None
        except UnicodeDecodeError:  # pyarrow decodes header names itself
            raise errors.CsvFormatError(f"malformed CSV in file {name}: invalid UTF-8 in header") from None
        check_header(name, header, table)
        conv = CellConverter(name, table, header, params, allow_unmodified)
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except pa.ArrowInvalid as e:
                    if src.at_eof and src.quotes % 2:
                        raise _unterminated(name) from None
                    raise _csv_error(name, e) from None
                conv.add(batch)
        except ValueConversionError:
            # A value swallowed by an unterminated quote usually fails conversion first.
            if src.at_eof and src.quotes % 2:
                raise _unterminated(name) from None
            raise
        if src.quotes % 2:
            raise _unterminated(name)
        return conv.result()
    finally:
        plain.close()

