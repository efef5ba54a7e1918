"""OpenLineage RunEvents for the core's table operations (pure: no I/O, no client).

One run per request (the core's run id), START then COMPLETE or FAIL; one job per table
(`{schema}.{table}` in the configured job namespace); the table is the run's output
dataset, named by its canonical URI (uris.openlineage_name). COMPLETE carries what the
commit wrote: the schema, the Delta version, the lifecycle change, row counts
(outputStatistics.rowCount = inserted + updated, and all three counts in the custom
`deltaDestination_commit` facet). FAIL carries the error's class and safe message only
(typed core errors never hold customer values; anything else is reported by class).
"""
from __future__ import annotations

import functools
from datetime import datetime, timezone
from importlib import metadata
from typing import Optional

import attr
from openlineage.client.event_v2 import Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    OutputDatasetFacet,
    dataset_version_dataset,
    datasource_dataset,
    error_message_run,
    job_type_job,
    lifecycle_state_change_dataset,
    output_statistics_output_dataset,
    processing_engine_run,
    schema_dataset,
    storage_dataset,
)

from ..errors import DestinationError
from ..core.events import TableEvent, TableOutcome
from ..core.types import spark_type
from .uris import openlineage_name

DIST = "fivetran-delta-destination"
COMMIT_FACET = "deltaDestination_commit"
COMMIT_SCHEMA_URL = ("urn:fivetran-delta-destination:facets:1-0-0:DeltaCommitOutputDatasetFacet.json"
                     "#/$defs/DeltaCommitOutputDatasetFacet")
# The custom facet's JSON Schema (OpenLineage's rules for custom facets: own, immutable schema URL).
COMMIT_FACET_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": COMMIT_SCHEMA_URL.split("#")[0],
    "$defs": {
        "DeltaCommitOutputDatasetFacet": {
            "allOf": [
                {"$ref": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/OutputDatasetFacet"},
                {
                    "type": "object",
                    "properties": {
                        "operation": {"type": "string", "description": "the core operation (WriteBatch, Truncate, ...)"},
                        "door": {"type": "string", "description": "the front door that asked (fivetran, airbyte, conduit)"},
                        "inserted": {"type": "integer", "minimum": 0, "description": "rows inserted (as the engine counted them in the commit; else rows upserted)"},
                        "updated": {"type": "integer", "minimum": 0, "description": "existing rows updated or replaced"},
                        "deleted": {"type": "integer", "minimum": 0, "description": "rows deleted"},
                    },
                    "required": ["operation", "door"],
                    "additionalProperties": True,
                },
            ],
            "type": "object",
        }
    },
    "type": "object",
    "properties": {COMMIT_FACET: {"$ref": "#/$defs/DeltaCommitOutputDatasetFacet"}},
}


@attr.define
class DeltaCommitOutputDatasetFacet(OutputDatasetFacet):
    operation: str = attr.field()
    door: str = attr.field()
    inserted: Optional[int] = attr.field(default=None)
    updated: Optional[int] = attr.field(default=None)
    deleted: Optional[int] = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return COMMIT_SCHEMA_URL


@functools.lru_cache(maxsize=None)
def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


PRODUCER = f"https://pypi.org/project/{DIST}/{_version(DIST)}"


def job_name(event: TableEvent) -> str:
    return f"{event.schema}.{event.table}"


def job_type(operation: str) -> str:
    """WriteBatch -> WRITE_BATCH, Migrate:rename_column -> MIGRATE_RENAME_COLUMN."""
    out = []
    for i, ch in enumerate(operation):
        if ch.isupper() and i and operation[i - 1].islower():
            out.append("_")
        out.append(ch.upper() if ch.isalnum() else "_")
    return "".join(out)


def error_text(error: BaseException) -> str:
    """What may leave the process about a failure: typed messages, else the class name."""
    if isinstance(error, DestinationError):
        return f"{type(error).__name__}: {error.message}"
    return type(error).__name__


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _output(uri: Optional[str], outcome: Optional[TableOutcome], event: TableEvent) -> list[OutputDataset]:
    if uri is None:
        return []
    ol = openlineage_name(uri)
    facets: dict = {
        "dataSource": datasource_dataset.DatasourceDatasetFacet(name=ol.namespace, uri=ol.namespace),
        "storage": storage_dataset.StorageDatasetFacet(storageLayer="delta", fileFormat="parquet"),
    }
    output_facets: dict = {}
    if outcome is not None:
        if outcome.columns:
            facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=[
                schema_dataset.SchemaDatasetFacetFields(name=c.name, type=spark_type(c).lower(), ordinal_position=i)
                for i, c in enumerate(outcome.columns, start=1)
            ])
        if outcome.committed and outcome.version is not None:
            facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(outcome.version))
        if outcome.committed and outcome.lifecycle:
            facets["lifecycleStateChange"] = lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet(
                lifecycleStateChange=lifecycle_state_change_dataset.LifecycleStateChange(outcome.lifecycle))
        counts = (outcome.inserted, outcome.updated, outcome.deleted)
        if outcome.committed and any(n is not None for n in counts):
            written = (outcome.inserted or 0) + (outcome.updated or 0)
            output_facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=written)
        output_facets[COMMIT_FACET] = DeltaCommitOutputDatasetFacet(
            operation=event.operation, door=event.door, inserted=outcome.inserted, updated=outcome.updated,
            deleted=outcome.deleted)
    return [OutputDataset(namespace=ol.namespace, name=ol.name, facets=facets, outputFacets=output_facets)]


def run_event(state: RunState, event: TableEvent, job_namespace: str, uri: Optional[str],
              outcome: Optional[TableOutcome] = None, error: Optional[BaseException] = None,
              event_time: Optional[str] = None) -> RunEvent:
    run_facets: dict = {
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
            version=_version(DIST), name=DIST, openlineageAdapterVersion=_version("openlineage-python")),
    }
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error_text(error), programmingLanguage="python")
    job_facets = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration=f"{event.door.upper()}_DELTA", jobType=job_type(event.operation)),
    }
    return RunEvent(
        eventType=state,
        eventTime=event_time or _now(),
        run=Run(runId=event.run_id, facets=run_facets),
        job=Job(namespace=job_namespace, name=job_name(event), facets=job_facets),
        inputs=[],
        outputs=_output(uri, outcome, event),
        producer=PRODUCER,
    )
