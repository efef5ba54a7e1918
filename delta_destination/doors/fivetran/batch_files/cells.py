"""Text cells with Fivetran's NULL and unmodified markers -> typed Arrow + unmodified mask."""
from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc

from ....errors import SchemaMismatch, ValueConversionError
from ....core.model import Column, TableSchema
from ....core.types import arrow_type, type_label
from ....core.values import ConversionFailed, convert_text, convert_typed
from .params import BatchData, FileParams


class CellConverter:
    """Turns text record batches into typed ones and keeps them for one final Table."""

    def __init__(self, name: str, table: TableSchema, header: list[str], params: FileParams,
                 allow_unmodified: bool):
        self.name = name
        present = set(header)
        self.columns = [c for c in table.columns if c.name in present]
        self.null = params.null_string
        self.unmod = params.unmodified_string if (allow_unmodified and params.unmodified_string
                                                  and params.unmodified_string != params.null_string) else None
        self.allow_unmodified = allow_unmodified
        self.schema = pa.schema([pa.field(c.name, arrow_type(c)) for c in self.columns])
        self.unmod_schema = pa.schema([pa.field(c.name, pa.bool_()) for c in self.columns])
        self.values: list[pa.RecordBatch] = []
        self.unmods: list[pa.RecordBatch] = []
        self.any_unmod = False
        self.rows = 0

    def fail(self, col: Column, index: int, reason: str) -> ValueConversionError:
        return ValueConversionError(
            f"file {self.name}: column {col.name!r} ({type_label(col)}) row {self.rows + index + 1}: "
            f"value does not fit: {reason}")

    def column(self, col: Column, text: pa.Array) -> tuple[pa.Array, Optional[pa.Array]]:
        """Text cells (no nulls) -> (typed values, unmodified mask or None)."""
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        if text.type != pa.string():
            text = text.cast(pa.string())
        null_mask = pc.equal(text, self.null)
        if text.null_count:
            null_mask = pc.or_kleene(null_mask, text.is_null())
        unmod_mask = None
        hide = null_mask
        if self.unmod is not None:
            unmod_mask = pc.equal(text, self.unmod).fill_null(False)
            hide = pc.or_(null_mask, unmod_mask)
        if pc.any(hide).as_py():
            text = pc.if_else(hide, pa.scalar(None, pa.string()), text)
        try:
            return convert_text(text, col), unmod_mask
        except ConversionFailed as e:
            raise self.fail(col, e.index, e.reason) from None

    def typed(self, col: Column, arr: pa.Array) -> pa.Array:
        """A typed column (Parquet) -> the column's Arrow type; it cannot hold markers."""
        try:
            return convert_typed(arr, col)
        except ConversionFailed as e:
            raise self.fail(col, e.index, e.reason) from None
        except SchemaMismatch as e:
            raise SchemaMismatch(f"file {self.name}: {e.message}") from None

    def add_arrays(self, arrays: dict[str, tuple[pa.Array, Optional[pa.Array]]], n: int) -> None:
        vals = [arrays[c.name][0] for c in self.columns]
        self.values.append(pa.RecordBatch.from_arrays(vals, schema=self.schema))
        if self.allow_unmodified:
            masks = []
            for c in self.columns:
                m = arrays[c.name][1]
                if m is None:
                    m = pa.nulls(n, pa.bool_()).fill_null(False)
                elif not self.any_unmod and pc.any(m).as_py():
                    self.any_unmod = True
                masks.append(m)
            self.unmods.append(pa.RecordBatch.from_arrays(masks, schema=self.unmod_schema))
        self.rows += n

    def add(self, batch: pa.RecordBatch) -> None:
        arrays = {c.name: self.column(c, batch.column(c.name)) for c in self.columns}
        self.add_arrays(arrays, batch.num_rows)

    def result(self) -> BatchData:
        values = pa.Table.from_batches(self.values, schema=self.schema)
        unmod = None
        if self.allow_unmodified and self.any_unmod:
            unmod = pa.Table.from_batches(self.unmods, schema=self.unmod_schema)
        return BatchData(values=values, unmodified=unmod, num_rows=self.rows)

