"""Runs INSIDE the test-only Airflow venv (scripts/airflow_test_venv.sh), never in the project's:
reads a JSON list of URIs on stdin and prints, for each, what Airflow's own code makes of it.

For each URI: `asset_uri` = `airflow.sdk.Asset(uri=...).uri` (core rules + the provider handler
registered for the scheme) or the error class when Airflow refuses it; `openlineage` = the
(namespace, name) of the provider's `to_openlineage_converter` for the scheme, when one is
registered. Also prints which schemes have a handler, so a test notices a provider that failed
to import (Airflow then silently skips its handler).
"""
import json
import sys
import warnings


def main() -> None:
    from airflow.sdk import Asset
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    pm = ProvidersManagerTaskRuntime()
    handlers = pm.asset_uri_handlers
    converters = pm.asset_to_openlineage_converters
    out = []
    for uri in json.load(sys.stdin):
        item = {"uri": uri}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                asset = Asset(uri=uri)
            item["asset_uri"] = asset.uri
            scheme = asset.uri.split("://", 1)[0]
            conv = converters.get(scheme)
            if conv is not None:
                ds = conv(asset, None)
                item["openlineage"] = [ds.namespace, ds.name]
        except Exception as exc:  # noqa: BLE001 - reported to the test
            item["error"] = type(exc).__name__
        out.append(item)
    print(json.dumps({"handlers": sorted(handlers), "converters": sorted(converters), "results": out}))


if __name__ == "__main__":
    main()
