"""Iceberg's SQL catalog (pyiceberg `SqlCatalog`, the tables of Iceberg's Java `JdbcCatalog`) as the
place of the entries of catalogs.py: `iceberg_catalog_uri` a SQLAlchemy URL (sqlite, PostgreSQL,
MySQL), `iceberg_catalog_name` the catalog name of its rows.

pyiceberg makes the catalog's tables (`iceberg_tables`, `iceberg_namespace_properties`) when they are
missing and the namespaces; the entry primitives are single statements on `iceberg_tables` through
its SQLAlchemy model, the move a compare-and-set on `metadata_location` as pyiceberg's and Java's own
commits do it. Not `SqlCatalog.register_table`: it reads the metadata back through pyiceberg's own
FileIO, which the store's settings of a request do not configure (core/iceberg/file_io.py).

Rows are written with `iceberg_type` NULL, which both catalog schema versions read as a table
(pyiceberg's and Java's v0 have no such column; their v1 take NULL for a table).
"""
from __future__ import annotations

from typing import Optional

from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ...errors import InvalidRequest
from .catalogs import IcebergCatalog

NAME_LIMIT = 255   # the catalog's name columns (String(255))


class SqlIcebergCatalog(IcebergCatalog):
    name = "the Iceberg SQL catalog"

    def __init__(self, uri: str, catalog_name: str):
        self.catalog = SqlCatalog(catalog_name, uri=uri)
        self.catalog_name = catalog_name

    def check(self, schema: str, table: str) -> None:
        if "." in schema:
            raise InvalidRequest(f"schema name {schema!r} cannot be a namespace of the Iceberg catalog "
                                 "(iceberg_catalog_uri): a dot there separates nested namespaces")
        for kind, name in (("schema", schema), ("table", table)):
            if len(name) > NAME_LIMIT:
                raise InvalidRequest(f"{kind} name of {len(name)} characters cannot be held by the Iceberg catalog "
                                     f"(iceberg_catalog_uri): at most {NAME_LIMIT}")

    def _where(self, schema: str, table: str):
        return (IcebergTables.catalog_name == self.catalog_name, IcebergTables.table_namespace == schema,
                IcebergTables.table_name == table)

    def entry(self, schema: str, table: str) -> Optional[str]:
        with Session(self.catalog.engine) as session:
            row = session.execute(select(IcebergTables.metadata_location).where(*self._where(schema, table))).first()
        return row[0] if row is not None else None

    def create_entry(self, schema: str, table: str, metadata_location: str) -> bool:
        self.check(schema, table)
        if not self.catalog.namespace_exists(schema):
            try:
                self.catalog.create_namespace(schema)
            except NamespaceAlreadyExistsError:
                pass   # another writer made it
        with Session(self.catalog.engine) as session:
            try:
                session.execute(insert(IcebergTables).values(
                    catalog_name=self.catalog_name, table_namespace=schema, table_name=table,
                    metadata_location=metadata_location, previous_metadata_location=None))
                session.commit()
            except IntegrityError:
                return False
        return True

    def move_entry(self, schema: str, table: str, expected: str, metadata_location: str) -> bool:
        with Session(self.catalog.engine) as session:
            moved = session.execute(
                update(IcebergTables).where(*self._where(schema, table), IcebergTables.metadata_location == expected)
                .values(metadata_location=metadata_location, previous_metadata_location=expected))
            session.commit()
        return moved.rowcount == 1

    def drop_entry(self, schema: str, table: str, expected: str) -> None:
        with Session(self.catalog.engine) as session:
            session.execute(delete(IcebergTables).where(*self._where(schema, table),
                                                        IcebergTables.metadata_location == expected))
            session.commit()
