//! `--log-format` and `--otlp-endpoint`: how every subcommand logs and whether it
//! exports its spans (docs/operations-traces.md). Global flags, so they go
//! anywhere on the command line and each has its `SLUICE_*` variable (and so a
//! config-file key).

use clap::{Args, ValueEnum};
use sluice_telemetry::{LogFormat, OtlpSettings, Settings, Telemetry};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line (timestamp, level, target, fields, span, spans).
    Json,
}

#[derive(Args, Clone, Debug, Default)]
pub struct TelemetryFlags {
    /// Log lines on stderr as text or JSON lines (the level: SLUICE_LOG, e.g.
    /// `info` or `sluice_worker=debug`).
    #[arg(long, global = true, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormatArg,
    /// Export spans over OTLP/gRPC to this collector, http://HOST:PORT (e.g. an
    /// OpenTelemetry Collector or Jaeger on port 4317). Unset: the standard
    /// OTEL_EXPORTER_OTLP_ENDPOINT if set, else no export.
    #[arg(long, global = true, env = "SLUICE_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans. Default: sluice-ROLE (sluice-dispatcher,
    /// sluice-worker, sluice-read, ...).
    #[arg(long, global = true, env = "SLUICE_OTLP_SERVICE_NAME", value_name = "NAME")]
    pub otlp_service_name: Option<String>,
}

impl TelemetryFlags {
    /// Installs logging (and export, if asked) for the subcommand `role`, whose
    /// log filter is `default_filter` unless SLUICE_LOG says otherwise. Call it
    /// inside the runtime the exporter will use.
    pub fn init(&self, role: &str, default_filter: &str) -> anyhow::Result<Telemetry> {
        let service = self.otlp_service_name.clone().unwrap_or_else(|| format!("sluice-{role}"));
        let settings = Settings {
            format: match self.log_format {
                LogFormatArg::Text => LogFormat::Text,
                LogFormatArg::Json => LogFormat::Json,
            },
            default_filter: default_filter.to_string(),
            otlp: OtlpSettings::from_endpoint_or_env(self.otlp_endpoint.as_deref(), service),
        };
        let telemetry = Telemetry::init(&settings).map_err(|e| match e {
            sluice_telemetry::TelemetryError::Endpoint { .. } => {
                anyhow::anyhow!(
                    "{e} (--otlp-endpoint / SLUICE_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT)"
                )
            }
            e => e.into(),
        })?;
        if let Some(otlp) = &settings.otlp {
            tracing::info!(endpoint = %otlp.endpoint, service = %otlp.service_name, "exporting spans over OTLP");
        }
        Ok(telemetry)
    }
}
