//! The OpenMetrics text encoding of the registry, for scrapers that ask for it (`Accept:
//! application/openmetrics-text`). The series are gathered from the `prometheus` registry and
//! written by `prometheus-client`'s OpenMetrics encoder, so neither format is written by hand.

use prometheus::proto::{Metric, MetricFamily, MetricType};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType as OmType;

/// Content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One scrape's families, handed to the OpenMetrics encoder.
#[derive(Debug)]
struct Gathered(Vec<MetricFamily>);

fn labels(m: &Metric) -> Vec<(String, String)> {
    m.get_label().iter().map(|l| (l.name().to_string(), l.value().to_string())).collect()
}

/// Encode one sample of `family` for `m`, under its labels (if any).
fn sample(
    enc: &mut MetricEncoder<'_>,
    kind: MetricType,
    m: &Metric,
) -> Result<(), std::fmt::Error> {
    let labels = labels(m);
    if labels.is_empty() {
        value(enc, kind, m)
    } else {
        value(&mut enc.encode_family(&labels)?, kind, m)
    }
}

fn value(enc: &mut MetricEncoder<'_>, kind: MetricType, m: &Metric) -> Result<(), std::fmt::Error> {
    match kind {
        MetricType::COUNTER => {
            enc.encode_counter::<NoLabelSet, _, u64>(&(m.get_counter().get_value() as u64), None)
        }
        MetricType::HISTOGRAM => {
            let h = m.get_histogram();
            // Cumulative counts per upper bound -> counts per bucket, then the +Inf bucket
            // (which this encoder writes for an upper bound of f64::MAX).
            let mut buckets = Vec::with_capacity(h.get_bucket().len() + 1);
            let mut below = 0;
            for b in h.get_bucket() {
                let c = b.cumulative_count();
                buckets.push((b.upper_bound(), c - below));
                below = c;
            }
            let count = h.get_sample_count();
            buckets.push((f64::MAX, count.saturating_sub(below)));
            enc.encode_histogram::<NoLabelSet>(h.get_sample_sum(), count, &buckets, None)
        }
        // Gauges (and anything else the registry may hold, reported as its value).
        _ => {
            let v = m.get_gauge().get_value();
            if v.fract() == 0.0 && v.abs() < 9e15 {
                enc.encode_gauge(&(v as i64))
            } else {
                enc.encode_gauge(&v)
            }
        }
    }
}

impl Collector for Gathered {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let kind = f.get_field_type();
            let (name, om) = match kind {
                // OpenMetrics names the counter family without `_total` and adds it to samples.
                MetricType::COUNTER => {
                    (f.name().strip_suffix("_total").unwrap_or(f.name()), OmType::Counter)
                }
                MetricType::HISTOGRAM => (f.name(), OmType::Histogram),
                _ => (f.name(), OmType::Gauge),
            };
            let mut enc = encoder.encode_descriptor(name, f.help(), None, om)?;
            for m in f.get_metric() {
                sample(&mut enc, kind, m)?;
            }
        }
        Ok(())
    }
}

/// `families` in the OpenMetrics text format (ending with `# EOF`).
pub fn encode(families: Vec<MetricFamily>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Gathered(families)));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(error = %e, "encoding metrics (OpenMetrics) failed");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

    #[test]
    fn counters_gauges_and_histograms_in_openmetrics() {
        let r = Registry::new();
        let c = IntCounterVec::new(Opts::new("x_requests_total", "Requests."), &["op"]).unwrap();
        let g = IntGauge::new("x_in_flight", "In flight.").unwrap();
        let h = HistogramVec::new(
            HistogramOpts::new("x_seconds", "Latency.").buckets(vec![0.1, 1.0]),
            &["op"],
        )
        .unwrap();
        r.register(Box::new(c.clone())).unwrap();
        r.register(Box::new(g.clone())).unwrap();
        r.register(Box::new(h.clone())).unwrap();
        c.with_label_values(&["read"]).inc_by(3);
        g.set(2);
        for v in [0.05, 0.5, 5.0] {
            h.with_label_values(&["read"]).observe(v);
        }
        let text = encode(r.gather());
        for line in [
            "# TYPE x_requests counter",
            "x_requests_total{op=\"read\"} 3",
            "# TYPE x_in_flight gauge",
            "x_in_flight 2",
            "# TYPE x_seconds histogram",
            "x_seconds_count{op=\"read\"} 3",
            "x_seconds_bucket{le=\"0.1\",op=\"read\"} 1",
            "x_seconds_bucket{le=\"1.0\",op=\"read\"} 2",
            "x_seconds_bucket{le=\"+Inf\",op=\"read\"} 3",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from:\n{text}");
        }
    }
}
