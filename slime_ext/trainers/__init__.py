"""The embedded backend's trainer: turn judged turns into Samples and take optimizer steps."""
