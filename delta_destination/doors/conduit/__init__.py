"""The Conduit door: a standalone Conduit connector (go-plugin over gRPC, connector protocol v2)
that applies OpenCDC records to Delta tables through the core. See docs/conduit.md."""
