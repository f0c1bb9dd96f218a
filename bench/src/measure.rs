//! What a section measured: [`Latency`] (median, p99 and max of durations) and
//! [`Outcome`] (measured, skipped or failed). A leaf: every measuring module and
//! the report use it, and it uses none of them.

use std::time::Duration;

use serde::Serialize;

/// Median, p99 and max of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(mut v: Vec<Duration>) -> Option<Latency> {
        if v.is_empty() {
            return None;
        }
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| ms(v[((v.len() - 1) as f64 * q).round() as usize]);
        Some(Latency { samples: v.len(), median_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1.0) })
    }

    /// `median … p99 …`, for the table.
    pub fn show(&self) -> String {
        format!("median {}  p99 {}", ms(self.median_ms), ms(self.p99_ms))
    }
}

/// A section's result: measured, skipped (loudly, with the reason), or failed.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome<T> {
    Measured(T),
    Skipped { reason: String },
    Failed { error: String },
}

impl<T> Outcome<T> {
    pub fn from_result(r: anyhow::Result<T>) -> Outcome<T> {
        match r {
            Ok(v) => Outcome::Measured(v),
            Err(e) => Outcome::Failed { error: format!("{e:#}") },
        }
    }

    pub fn measured(&self) -> Option<&T> {
        match self {
            Outcome::Measured(v) => Some(v),
            _ => None,
        }
    }
}

/// The error of a failed section.
pub fn failed_error<T>(o: &Outcome<T>) -> Option<&String> {
    match o {
        Outcome::Failed { error } => Some(error),
        _ => None,
    }
}

/// Milliseconds with a precision that suits the size.
pub fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 1000.0 {
        format!("{v:.0} ms")
    } else {
        format!("{:.2} s", v / 1000.0)
    }
}

/// Median and extremes of one figure over runs.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub(crate) fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        match (v.first(), v.last()) {
            (Some(min), Some(max)) => Spread { median: v[v.len() / 2], min: *min, max: *max },
            _ => Spread::default(),
        }
    }

    /// (max - min) / median, in percent: the run-to-run noise.
    pub fn noise_percent(&self) -> f64 {
        100.0 * (self.max - self.min) / self.median.max(1e-9)
    }
}
