"""The Dagster face of cdc-platform: thin resources, jobs, sensors and assets over the engine."""
