# The destination on the embedded Sail engine: no JVM needed.
FROM python:3.11-slim

WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml Makefile README.md ./
COPY proto ./proto
COPY buildkit ./buildkit
COPY delta_destination ./delta_destination
# Build the venv and generate the gRPC stubs from proto/ exactly as `make` does locally (without the
# Delta jars of the Apache Spark engine: this image has no JVM).
RUN make install-python PYTHON=python3.11 && mkdir -p /data/warehouse

EXPOSE 50052
VOLUME ["/data/warehouse"]
ENTRYPOINT ["/app/.venv/bin/fivetran-delta-destination"]
CMD ["--port", "50052", "--warehouse", "/data/warehouse"]
