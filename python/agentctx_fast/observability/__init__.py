"""Metrics and OpenTelemetry tracing of the runner."""
