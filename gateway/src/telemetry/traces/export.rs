//! Where traces go: the standard OpenTelemetry environment variables (also flags),
//! the OTLP exporter they describe (http/protobuf over hyper, or gRPC over tonic), the
//! sampler, and the batch processor.
//!
//! The batch processor is the SDK's thread-based one: a finished span is queued to its
//! thread (no task is woken per span), which encodes and sends a batch when 512 spans
//! are queued or every [`EXPORT_EVERY`]. The exporter runs there on a current-thread
//! tokio runtime of its own, so neither the encoding nor the sending of a batch is a
//! task on the runtime that serves requests, and a flush or shutdown never waits on a
//! runtime that the caller is blocking.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanExporter,
};

use super::Tracing;

/// How long an export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Batches leave at least this often (a full batch of 512 spans leaves at once; an
/// empty batch sends nothing): the "within 5 s" of docs/design.md §11, with room for
/// the export itself.
const EXPORT_EVERY: Duration = Duration::from_millis(2500);

/// Trace export options. Off unless an endpoint is set.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// OTLP base endpoint; http/protobuf appends `/v1/traces`. Setting it turns tracing on.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// OTLP endpoint for traces, used as is (overrides `--otlp-endpoint`).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: Option<String>,
    /// `http/protobuf` (default) or `grpc`.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL")]
    pub otlp_protocol: Option<String>,
    /// The resource's `service.name` (default `sluice-gateway`).
    #[arg(long, env = "OTEL_SERVICE_NAME")]
    pub otel_service_name: Option<String>,
    /// `always_on`, `always_off`, `traceidratio`, `parentbased_always_on` (default),
    /// `parentbased_always_off` or `parentbased_traceidratio`.
    #[arg(long, env = "OTEL_TRACES_SAMPLER")]
    pub traces_sampler: Option<String>,
    /// The ratio of the `traceidratio` samplers (default 1.0).
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG")]
    pub traces_sampler_arg: Option<String>,
    /// Record prompt and completion text on request spans (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`). Off by default: they may hold personal data.
    #[arg(long, env = "SLUICE_TRACE_CONTENT")]
    pub trace_content: bool,
}

/// The wire protocol of the exporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    HttpProtobuf,
    Grpc,
}

impl TraceArgs {
    /// The endpoint spans are sent to, and how; `None` when tracing is off.
    fn target(&self) -> anyhow::Result<Option<(String, Wire)>> {
        let wire = match self.otlp_protocol.as_deref().map(str::trim) {
            None | Some("" | "http/protobuf") => Wire::HttpProtobuf,
            Some("grpc") => Wire::Grpc,
            Some(other) => {
                anyhow::bail!("OTEL_EXPORTER_OTLP_PROTOCOL {other:?} is not supported: use http/protobuf or grpc")
            }
        };
        let nonempty = |v: &Option<String>| v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
        let endpoint = match (nonempty(&self.otlp_traces_endpoint), nonempty(&self.otlp_endpoint)) {
            (Some(traces), _) => traces,
            (None, Some(base)) if wire == Wire::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, Some(base)) => base,
            (None, None) => return Ok(None),
        };
        Ok(Some((endpoint, wire)))
    }

    fn sampler(&self) -> anyhow::Result<Sampler> {
        let ratio = match self.traces_sampler_arg.as_deref().map(str::trim) {
            None | Some("") => 1.0,
            Some(text) => {
                text.parse::<f64>().with_context(|| format!("OTEL_TRACES_SAMPLER_ARG {text:?} is not a number"))?
            }
        };
        Ok(match self.traces_sampler.as_deref().map(str::trim).unwrap_or("parentbased_always_on") {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatioBased(ratio),
            "" | "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            "parentbased_traceidratio" => Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))),
            other => anyhow::bail!("OTEL_TRACES_SAMPLER {other:?} is not supported"),
        })
    }
}

/// An exporter driven on the batch processor's thread by a runtime of its own (see the
/// module's doc). Its runtime also runs the connection tasks of its HTTP client or gRPC
/// channel, made inside it.
struct OwnRuntime<E> {
    runtime: tokio::runtime::Runtime,
    inner: E,
}

impl<E> fmt::Debug for OwnRuntime<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnRuntime")
    }
}

impl<E: SpanExporter> SpanExporter for OwnRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        // Called on the processor's thread, never on a runtime's.
        std::future::ready(self.runtime.block_on(self.inner.export(batch)))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _inside = self.runtime.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _inside = self.runtime.enter();
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter for `endpoint`, made inside `runtime` (tonic spawns its channel's
/// worker where it is made).
fn exporter(
    endpoint: &str,
    wire: Wire,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    let _inside = runtime.enter();
    let exporter = match wire {
        Wire::HttpProtobuf => {
            let client =
                opentelemetry_http::hyper::HyperClient::new(crate::egress::plain_or_tls()?, EXPORT_TIMEOUT, None);
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(EXPORT_TIMEOUT)
                .build()
        }
        Wire::Grpc => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(EXPORT_TIMEOUT);
            if endpoint.starts_with("https://") {
                use opentelemetry_otlp::WithTonicConfig as _;
                builder = builder.with_tls_config(
                    opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new().with_webpki_roots(),
                );
            }
            builder.build()
        }
    };
    exporter.with_context(|| format!("building the OTLP exporter for {endpoint}"))
}

/// Starts exporting as `args` say; `None` when no endpoint is set.
pub fn start(args: &TraceArgs) -> anyhow::Result<Option<Tracing>> {
    let Some((endpoint, wire)) = args.target()? else { return Ok(None) };
    let sampler = args.sampler()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the trace exporter's runtime")?;
    let inner = match exporter(&endpoint, wire, &runtime) {
        Ok(e) => e,
        Err(e) => {
            // Dropping a runtime may block, which an async caller must not.
            runtime.shutdown_background();
            return Err(e);
        }
    };
    let batches = BatchConfigBuilder::default().with_scheduled_delay(EXPORT_EVERY).build();
    let processor = BatchSpanProcessor::builder(OwnRuntime { runtime, inner }).with_batch_config(batches).build();
    let service =
        args.otel_service_name.clone().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "sluice-gateway".into());
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(Resource::builder_empty().with_service_name(service.clone()).build())
        .build();
    let tracer = provider.tracer("sluice-gateway");
    tracing::info!(%endpoint, protocol = ?wire, service, "exporting traces");
    Ok(Some(Tracing { tracer, provider, content: args.trace_content }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(endpoint: Option<&str>, traces: Option<&str>, protocol: Option<&str>) -> TraceArgs {
        TraceArgs {
            otlp_endpoint: endpoint.map(Into::into),
            otlp_traces_endpoint: traces.map(Into::into),
            otlp_protocol: protocol.map(Into::into),
            ..TraceArgs::default()
        }
    }

    #[test]
    fn endpoints_follow_the_otlp_rules() -> anyhow::Result<()> {
        assert_eq!(args(None, None, None).target()?, None);
        assert_eq!(args(Some(""), None, None).target()?, None);
        assert_eq!(
            args(Some("http://c:4318/"), None, None).target()?,
            Some(("http://c:4318/v1/traces".into(), Wire::HttpProtobuf))
        );
        assert_eq!(
            args(Some("http://c:4318"), Some("http://t:1/x"), None).target()?,
            Some(("http://t:1/x".into(), Wire::HttpProtobuf))
        );
        assert_eq!(
            args(Some("http://c:4317"), None, Some("grpc")).target()?,
            Some(("http://c:4317".into(), Wire::Grpc))
        );
        assert!(args(Some("http://c:4318"), None, Some("http/json")).target().is_err());
        Ok(())
    }

    #[test]
    fn samplers_are_the_standard_ones() -> anyhow::Result<()> {
        let with = |name: &str, arg: Option<&str>| TraceArgs {
            traces_sampler: Some(name.into()),
            traces_sampler_arg: arg.map(Into::into),
            ..TraceArgs::default()
        };
        assert!(matches!(TraceArgs::default().sampler()?, Sampler::ParentBased(_)));
        assert!(
            matches!(with("traceidratio", Some("0.25")).sampler()?, Sampler::TraceIdRatioBased(r) if (r - 0.25).abs() < 1e-9)
        );
        assert!(matches!(with("always_off", None).sampler()?, Sampler::AlwaysOff));
        assert!(with("traceidratio", Some("half")).sampler().is_err());
        assert!(with("jaeger_remote", None).sampler().is_err());
        Ok(())
    }
}
