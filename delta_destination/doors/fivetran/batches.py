"""A WriteBatch / WriteHistoryBatch request's files -> the core's change set."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ...core.changes import ChangeSet, Changes, Op
from ...core.model import TableSchema
from .batch_files import FileParams, read_batch_file
from .batch_files.errors import MissingKey

# Threads reading one request's files (each file is one stream; more threads than cores only
# raise the peak memory of a request).
READ_THREADS = max(1, min(4, os.cpu_count() or 1))


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
        delete); unmodified markers are honoured in update files only.

        Files are read on several threads (decryption, zstd, Arrow's CSV parser and the
        conversions release the GIL): a 1M-row load of four files read 1.2-1.5x faster on two
        cores (docs/performance-analysis.md). The change set keeps the SDK's order, and the
        first failing file in that order is the error reported."""
        files = [(op, path) for op, paths in ((Op.EARLIEST_START, self.earliest_start), (Op.UPSERT, self.replace),
                                              (Op.UPDATE, self.update), (Op.DELETE, self.delete)) for path in paths]
        keys = [self.key_for(path) for _, path in files]   # a missing key fails before any file is read

        def read_one(i: int) -> Changes:
            op, path = files[i]
            data = read_batch_file(path, keys[i], self.params, table, allow_unmodified=(op == Op.UPDATE))
            return Changes(op, data.values, data.unmodified, source=f"file {os.path.basename(path)}")

        changes = ChangeSet()
        workers = min(len(files), READ_THREADS)
        if workers <= 1:
            parts = [read_one(i) for i in range(len(files))]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="read-batch") as pool:
                parts = list(pool.map(read_one, range(len(files))))
        for part in parts:
            changes.add(part)
        return changes
