"""The table engine: every table operation, issued as Spark SQL / DataFrame work over Spark Connect."""
