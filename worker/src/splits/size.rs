//! How many splits a DYNAMIC task asks for per `GetSplit`, and whether it asks
//! for its next grant while it reads the current one: sized from the task's own
//! rate so that a grant covers about [`WINDOW`] of its work.
//!
//! Why: every grant is a round trip and a replicated log entry (~150 µs of
//! dispatcher CPU), so one grant per one-element split capped a read at a few
//! thousand elements per second, while the reader waited out each round trip
//! (issue 33). Asking for more at once amortises both, but what a worker holds
//! and has not delivered is lost if it dies (outside exactly-once jobs, dynamic
//! sharding is at most once) and is out of the other workers' reach at the end
//! of an epoch. Sizing by time bounds both by time: a grant is about 20 ms of
//! this task's work, within the worker's cap (`--splits-per-request`), and a
//! split that alone takes longer than that (a big file) is asked for one at a
//! time and not ahead, as before.
//!
//! The rule, per task:
//! - `u`, time per unit (source element, or file of a file source): a moving
//!   average (weight 1/4) of each grant's time over its units. A grant's time
//!   runs from the source taking it to the source asking for the next, so it is
//!   the pipeline's pace, slowed by its readers if they are slower, and not the
//!   round trip.
//! - `e`, units per split: the largest `ceil(units / splits asked)` of any
//!   grant (a full grant gives it exactly; a short one, at an epoch's end or an
//!   exactly-once orphan, never more).
//! - next ask `n = ceil(WINDOW / (u·e))`, at least 1, at most the cap and at
//!   most [`GROWTH`] times the previous ask (one fast first split cannot jump
//!   to the cap). Nothing measured yet: 1.
//! - ask ahead (one request in flight while the source reads) when a split
//!   takes less than the window: then the round trip is worth hiding, and what
//!   the task holds stays within two grants of about a window each.
//!
//! Pure: no clock or I/O; the provider passes the times in.

use std::time::Duration;

/// The work one grant should cover.
pub(crate) const WINDOW: Duration = Duration::from_millis(20);
/// The most an ask grows from one grant to the next.
pub(crate) const GROWTH: u32 = 4;
/// The weight of the newest grant in the time per unit.
const WEIGHT: f64 = 0.25;

#[derive(Debug, Clone)]
pub(crate) struct GrantSize {
    /// The most splits one ask takes (the worker's `splits_per_request`).
    cap: u32,
    /// The work one grant should cover: [`WINDOW`] but in tests.
    window: f64,
    /// Seconds per unit, once a grant was read.
    unit_secs: Option<f64>,
    units_per_split: u64,
    last_ask: u32,
}

impl GrantSize {
    pub(crate) fn new(cap: u32) -> Self {
        let cap = cap.clamp(1, sluice_proto::contract::MAX_SPLITS_PER_GRANT);
        GrantSize {
            cap,
            window: WINDOW.as_secs_f64(),
            unit_secs: None,
            units_per_split: 1,
            last_ask: 1,
        }
    }

    /// With a window other than [`WINDOW`] (tests: one that any pace on a
    /// loaded machine stays far within).
    #[cfg(test)]
    pub(crate) fn with_window(mut self, window: Duration) -> Self {
        self.window = window.as_secs_f64();
        self
    }

    fn split_secs(&self) -> Option<f64> {
        self.unit_secs.map(|u| u * self.units_per_split as f64)
    }

    /// The splits to ask for next (and remembered as the last ask).
    pub(crate) fn ask(&mut self) -> u32 {
        let n = match self.split_secs() {
            None => 1,
            Some(split) => {
                let limit = self.last_ask.saturating_mul(GROWTH).min(self.cap);
                let want = (self.window / split.max(f64::MIN_POSITIVE)).ceil();
                if want >= f64::from(limit) {
                    limit
                } else {
                    (want as u32).max(1)
                }
            }
        };
        self.last_ask = n;
        n
    }

    /// Whether to ask for the next grant while the current one is read: a split
    /// takes less than the window.
    pub(crate) fn ahead(&self) -> bool {
        self.split_secs().is_some_and(|s| s < self.window)
    }

    /// A grant asked as `asked` splits held `units` units and took the pipeline
    /// `took`. An empty grant (an exactly-once split all consumed) tells nothing.
    pub(crate) fn record(&mut self, asked: u32, units: u64, took: Duration) {
        if units == 0 {
            return;
        }
        self.units_per_split = self.units_per_split.max(units.div_ceil(u64::from(asked.max(1))));
        let u = took.as_secs_f64() / units as f64;
        self.unit_secs = Some(match self.unit_secs {
            None => u,
            Some(old) => old + WEIGHT * (u - old),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    #[test]
    fn asks_one_split_until_a_grant_was_read_then_grows_by_at_most_growth_to_the_cap() {
        let mut size = GrantSize::new(1024);
        assert_eq!(size.ask(), 1);
        assert!(!size.ahead(), "nothing measured: no request ahead");
        size.record(1, 1, US);
        let mut asks = Vec::new();
        for _ in 0..6 {
            let n = size.ask();
            asks.push(n);
            // One unit per split, 1 µs each: the window wants 20,000.
            size.record(n, u64::from(n), US * n);
        }
        assert_eq!(asks, [4, 16, 64, 256, 1024, 1024]);
        assert!(size.ahead());
    }

    #[test]
    fn a_grant_covers_about_the_window_of_work() {
        let mut size = GrantSize::new(1024);
        // Splits of 10 units at 100 µs each: 1 ms per split, 20 per window.
        for _ in 0..10 {
            let n = size.ask();
            size.record(n, 10 * u64::from(n), MS * n);
        }
        assert_eq!(size.ask(), 20);
        assert!(size.ahead());
    }

    #[test]
    fn splits_longer_than_the_window_are_asked_one_at_a_time_and_not_ahead() {
        let mut size = GrantSize::new(1024);
        size.ask();
        size.record(1, 1, 50 * MS);
        assert_eq!(size.ask(), 1);
        assert!(!size.ahead());
    }

    #[test]
    fn the_ask_shrinks_at_once_when_the_pipeline_slows_and_never_passes_the_cap() {
        let mut size = GrantSize::new(8);
        for _ in 0..5 {
            let n = size.ask();
            size.record(n, u64::from(n), US * n);
        }
        assert_eq!(size.ask(), 8, "the cap");
        // Readers slowed the pipeline to 50 ms per unit: the average moves a
        // quarter of the way each grant and the ask follows it down.
        let mut asks = Vec::new();
        for _ in 0..6 {
            let n = size.ask();
            asks.push(n);
            size.record(n, u64::from(n), 50 * MS * n);
        }
        assert!(asks.windows(2).all(|w| w[1] <= w[0]), "{asks:?}");
        assert_eq!(*asks.last().unwrap(), 1, "{asks:?}");
    }

    #[test]
    fn short_grants_do_not_lower_the_units_per_split_and_empty_ones_are_ignored() {
        let mut size = GrantSize::new(1024);
        size.ask();
        size.record(1, 100, 100 * US); // a full split: 100 units
        let n = size.ask();
        size.record(n, 3, 3 * US); // an epoch's last, short grant
        size.record(n, 0, 50 * MS); // an empty exactly-once grant
        assert_eq!(size.units_per_split, 100);
        // 1 µs per unit, 100 µs per split: 200 per window, within 4 × 4 = 16.
        assert_eq!(size.ask(), 16);
    }

    #[test]
    fn a_cap_of_zero_or_past_the_dispatchers_bound_is_clamped() {
        assert_eq!(GrantSize::new(0).cap, 1);
        assert_eq!(GrantSize::new(u32::MAX).cap, sluice_proto::contract::MAX_SPLITS_PER_GRANT);
    }
}
