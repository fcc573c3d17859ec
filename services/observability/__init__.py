"""Observability shared by the processes: Prometheus metrics (``metrics``), OpenTelemetry traces
(``telemetry``), log set-up (``logging_setup``) and their settings (``settings``)."""
