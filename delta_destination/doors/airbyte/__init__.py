"""The Airbyte door: `airbyte-delta-destination spec|check|write` over AirbyteMessage JSON lines."""
