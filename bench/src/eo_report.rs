//! The EXACTLY-ONCE section of the bench's table (figures of
//! [`crate::exactly_once`] and [`crate::eo_checkpoint`]), each next to what
//! bounds it in the same run.

use crate::eo_checkpoint::{
    fresh_time, ELEMENTS_PER_SPLIT, MIN_ELEMENTS, POSITION_EVERY, SPLITS_IN_FLIGHT,
};
use crate::exactly_once::{ExactlyOnceBench, RUNS};
use crate::measure::{failed_error, Outcome, Spread};
use sluice_client::exactly_once::REPORT_INTERVAL;

fn spread(s: &Spread, digits: usize) -> String {
    format!("{:.*} ({:.*}–{:.*})", digits, s.median, digits, s.min, digits, s.max)
}

/// The section's lines, in order.
pub fn lines(e: &ExactlyOnceBench, mut line: impl FnMut(String)) {
    checkpoint_lines(e, &mut line);
    match &e.deterministic {
        Outcome::Measured(d) => line(format!(
            "  deterministic order (2 consumers, median of {}): exactly-once {:.0} elements/s, \
             deterministic {:.0} elements/s, cost {:+.1} %",
            crate::deterministic::RUNS,
            d.exactly_once_per_s,
            d.deterministic_per_s,
            d.cost_percent()
        )),
        Outcome::Skipped { reason } => line(format!("  deterministic order: skipped ({reason})")),
        other => {
            let why = failed_error(other).map_or("not run", String::as_str);
            line(format!("  deterministic order: FAILED: {why}"));
        }
    }
}

fn checkpoint_lines(e: &ExactlyOnceBench, mut line: impl FnMut(String)) {
    line(format!(
        "EXACTLY-ONCE  (DYNAMIC range({}) int64 scalars, {} per split, 2 worker processes, \
         in-memory dispatcher, 1 reader; {RUNS} runs each, alternating; median (min–max))",
        e.elements, e.elements_per_split
    ));
    line(format!(
        "  {:<14} {:>28} {:>22} {:>22} {:>22}",
        "delivery", "elements/s", "reader µs/el", "workers µs/el", "dispatcher µs/el"
    ));
    for (name, t) in [("at-most-once", &e.at_most_once), ("exactly-once", &e.exactly_once)] {
        line(format!(
            "  {:<14} {:>28} {:>22} {:>22} {:>22}",
            name,
            spread(&t.elements_per_s, 0),
            spread(&t.reader_us, 3),
            spread(&t.workers_us, 3),
            spread(&t.dispatcher_us, 3)
        ));
    }
    let cpu = |t: &crate::exactly_once::Tracking| {
        t.reader_us.median + t.workers_us.median + t.dispatcher_us.median
    };
    let pairs = e.paired_overhead_percent();
    line(format!(
        "  tracking cost: {:+.1} % of the rate (medians; per pair {:+.1} .. {:+.1} %; \
         at-most-once run-to-run spread {:.1} %), CPU {:.3} -> {:.3} µs per element all \
         processes ({:+.1} %)",
        e.overhead_percent(),
        pairs.min,
        pairs.max,
        e.at_most_once.elements_per_s.noise_percent(),
        cpu(&e.at_most_once),
        cpu(&e.exactly_once),
        100.0 * (cpu(&e.exactly_once) / cpu(&e.at_most_once).max(1e-9) - 1.0)
    ));
    let c = match &e.checkpoints {
        Outcome::Measured(c) => c,
        Outcome::Skipped { reason } => {
            line(format!("  positions and restore: skipped ({reason})"));
            return;
        }
        other => {
            let why = failed_error(other).map_or("not run", String::as_str);
            line(format!("  positions and restore: FAILED: {why}"));
            return;
        }
    };
    line(format!(
        "  positions: range({}) read through shuffle({}) per worker ({} splits of {} in flight), \
         one every {POSITION_EVERY} elements through half the epoch; counted after \
         {MIN_ELEMENTS} elements",
        c.elements, c.shuffle_buffer, SPLITS_IN_FLIGHT, ELEMENTS_PER_SPLIT
    ));
    for (name, z, rate) in [
        (format!("paced ({:.0} ms step)", c.step_ms), &c.paced, c.paced_per_s),
        ("full speed".to_string(), &c.full_speed, c.full_speed_per_s),
    ] {
        line(format!(
            "    {name:<20} {:>7.0} elements/s, {} positions: bytes {}  ranges held {}  units held \
             {}  splits held {}  position() µs {}",
            rate,
            z.positions,
            spread(&z.bytes, 0),
            spread(&z.runs, 0),
            spread(&z.units, 0),
            spread(&z.splits, 0),
            spread(&z.position_us, 0)
        ));
    }
    line(format!(
        "    bound: the units in flight ({} splits x {} = {} units) plus what is consumed in a \
         report's interval and round trip ({} ms + RTT: {:.0} units paced, {:.0} at full \
         speed); not the epoch ({} units; a bitmap of it: {} bytes)",
        SPLITS_IN_FLIGHT,
        ELEMENTS_PER_SPLIT,
        SPLITS_IN_FLIGHT * ELEMENTS_PER_SPLIT,
        REPORT_INTERVAL.as_millis(),
        c.paced_per_s * REPORT_INTERVAL.as_secs_f64(),
        c.full_speed_per_s * REPORT_INTERVAL.as_secs_f64(),
        c.elements,
        c.elements.div_ceil(8)
    ));
    line(format!(
        "  restore from the position at half the epoch ({} bytes): first element after {:.1} ms, \
         end after {:.1} ms ({} elements; the epoch exactly once)",
        c.restored_from_bytes, c.restore_first_ms, c.restore_end_ms, c.restored_elements
    ));
    line(format!(
        "    limit: a fresh read's first element after {:.1} ms (the full-speed read); {} elements at its rate ({:.0}/s) \
         take {:.1} ms",
        c.fresh_first_ms,
        c.restored_elements,
        c.full_speed_per_s,
        fresh_time(c, c.restored_elements).as_secs_f64() * 1e3
    ));
}
