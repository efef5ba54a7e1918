#!/usr/bin/env bash
# A test-only virtualenv holding Airflow's own asset-URI normalisers, so tests/clients/test_lineage_uris_airflow.py
# can compare our canonical URIs with Airflow's answers (run as a subprocess: Airflow never enters the
# project's .venv). Created once into ./.airflow-venv (ignored by git) and reused while its stamp matches.
#
#   apache-airflow-task-sdk  airflow.sdk.Asset / _sanitize_uri: the generic rules (scheme, userinfo,
#                            query, fragment, trailing slash) and the per-scheme handler lookup
#   providers common-io, amazon, google   the handlers registered for file, s3 and gs (asset-uris in
#                            provider.yaml) and their OpenLineage converters; installed without their
#                            (huge) dependency trees, plus the few libraries their asset modules import
#                            (openlineage-python: the converters answer None without it; a handler whose module fails to import is silently not registered, and
#                            the test checks that s3, gs and file are)
# The Azure provider registers no asset handler in its released versions: abfss URIs are compared with
# the generic rules only.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
VENV=${AIRFLOW_TEST_VENV:-.airflow-venv}
SPEC="apache-airflow-task-sdk==1.3.2 apache-airflow-providers-common-compat==1.23.0 providers-no-deps:common-io==1.11.0,amazon==9.39.0,google==22.8.0 boto3 gcs ol v3"
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$SPEC" ]; then
  exit 0
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q apache-airflow-task-sdk==1.3.2 apache-airflow-providers-common-compat==1.23.0
"$VENV/bin/pip" install -q --no-deps apache-airflow-providers-common-io==1.11.0 \
  apache-airflow-providers-amazon==9.39.0 apache-airflow-providers-google==22.8.0
"$VENV/bin/pip" install -q boto3==1.44.8 google-cloud-storage==3.17.1 gcloud-aio-storage==9.6.5 \
  google-auth-httplib2==0.4.4 google-api-python-client==2.202.0 google-cloud-secret-manager==2.32.0 openlineage-python==1.54.0 2>&1 \
  | grep -v "dependency\|requires\|incompatible" || true
echo "$SPEC" > "$VENV/.stamp"
