"""A WriteBatch / WriteHistoryBatch request's files -> the core's change set."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ..core.changes import ChangeSet, Changes, Op
from ..core.model import TableSchema
from .batch_files import FileParams, read_batch_file
from .batch_files.errors import MissingKey


@dataclass(frozen=True)
class BatchFiles:
    """The files of one request, by role, with their AES keys."""

    params: FileParams
    keys: Mapping[str, bytes] = field(default_factory=dict)
    replace: Sequence[str] = ()
    update: Sequence[str] = ()
    delete: Sequence[str] = ()
    earliest_start: Sequence[str] = ()

    def key_for(self, path: str) -> Optional[bytes]:
        key = self.keys.get(path)
        if key is None and int(self.params.encryption) != 0:
            raise MissingKey(f"no decryption key for batch file {os.path.basename(path)}")
        return key

    def read(self, table: TableSchema) -> ChangeSet:
        """Every file in the table's types, in the SDK's order (earliest_start, replace/update,
        delete); unmodified markers are honoured in update files only."""
        changes = ChangeSet()
        for op, paths in ((Op.EARLIEST_START, self.earliest_start), (Op.UPSERT, self.replace),
                          (Op.UPDATE, self.update), (Op.DELETE, self.delete)):
            for path in paths:
                data = read_batch_file(path, self.key_for(path), self.params, table, allow_unmodified=(op == Op.UPDATE))
                changes.add(Changes(op, data.values, data.unmodified, source=f"file {os.path.basename(path)}"))
        return changes
