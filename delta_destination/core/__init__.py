"""The Delta core: tables, change sets, one-commit plans; doors use core.api.DeltaCore."""
