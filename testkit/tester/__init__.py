"""A client that drives the destination the way Fivetran's destination tester does.

It reads one tester input file (the JSON format of Fivetran's destination tester, see
testdata/fivetran-tester-inputs/PROVENANCE.md, "The format") and:

1. builds every table of ``create_table`` with Fivetran's system columns and calls CreateTable,
   then AlterTable for every ``alter_table`` entry (runner.py);
2. runs ``ops`` in order, writing batch files exactly like Fivetran (ops.py, batch_writer.py);
3. (with ``run_migrations``) runs the ``schema_migration`` steps (migrations.py);
4. calls DescribeTable for ``describe_table`` and compares with the expected schema;
5. reads every table back from disk with ``deltalake`` and compares it row by row with an
   in-memory REFERENCE MODEL that applies the documented semantics independently of the server
   (reference_model.py, compare.py).

Library use (tests)::

    result = run_input_file(stub, warehouse, path, schema, live_only=True,
                            compression=Compression.ZSTD, plain_text=False)
    assert result.ok, "\\n".join(result.problems)

Command line: ``python -m testkit.tester --help`` (cli.py).
"""
from .cli import main
from .compare import warehouse_of
from .inputs import OP_TIME, build_table, has_history_tables, input_files, load_input
from .migrations import MIGRATIONS
from .ops import OPS
from .reference_model import ModelError, ModelTable, ReferenceModel
from .runner import TesterRun, run_input_file, run_spec
from .state import RunResult
from .values import MAX_TS, file_value, migration_value, normalize

__all__ = ["warehouse_of", "MAX_TS", "MIGRATIONS", "ModelError", "ModelTable", "OPS", "OP_TIME", "ReferenceModel", "RunResult",
           "TesterRun", "build_table", "file_value", "has_history_tables", "input_files", "load_input", "main", "migration_value",
           "normalize", "run_input_file", "run_spec"]
