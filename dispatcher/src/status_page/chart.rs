//! The throughput chart: an inline SVG line chart, one path per job, drawn on
//! the server (no script). X is seconds before now over the history held (at
//! least a minute), y is source elements handed out per second, from 0 to a
//! round maximum above the highest point.

use std::fmt::Write;

use super::text::escape;
use super::view::Throughput;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
/// Room for the axis labels.
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 24.0;
const TOP: f64 = 10.0;
const RIGHT: f64 = 10.0;
/// One colour per charted job (distinguishable, also in grey scale order).
const COLOURS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

/// The smallest 1, 2 or 5 times a power of ten at or above `v` (1 for 0).
fn round_up(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|c| *c >= v).unwrap_or(v)
}

/// "12", "1.5k", "3.2M": short numbers for the y axis.
fn short(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v if v >= 10.0 || v == v.trunc() => format!("{v:.0}"),
        v => format!("{v:.1}"),
    }
}

/// The chart as an `<svg>` element, with a legend naming each job.
pub fn svg(t: &Throughput) -> String {
    let span = t.span_secs.max(60.0);
    let top =
        round_up(t.jobs.iter().flat_map(|j| j.points.iter().map(|p| p.1)).fold(0.0, f64::max));
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |ago: f64| LEFT + plot_w * (1.0 - ago.min(span) / span);
    let y = |rate: f64| TOP + plot_h * (1.0 - rate / top);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="throughput per job, elements per second">"#
    );
    // Axes, grid lines and labels.
    for i in 0..=4 {
        let v = top * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" class="axis">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            short(v),
            y = y(v),
        );
    }
    for i in 0..=4 {
        let ago = span * f64::from(4 - i) / 4.0;
        let label = if ago == 0.0 { "now".to_string() } else { format!("-{:.0}s", ago) };
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle" class="axis">{label}</text>"#,
            x(ago),
            HEIGHT - 6.0
        );
    }
    for (i, job) in t.jobs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut d = String::new();
        for (k, (ago, rate)) in job.points.iter().enumerate() {
            let _ = write!(d, "{}{:.1},{:.1} ", if k == 0 { "M" } else { "L" }, x(*ago), y(*rate));
        }
        let _ = write!(
            out,
            r#"<path class="series" data-job="{}" d="{}" fill="none" stroke="{colour}" stroke-width="2"><title>{}</title></path>"#,
            job.job_id,
            d.trim_end(),
            escape(&job.name)
        );
    }
    out.push_str("</svg>");
    out.push_str(r#"<ul class="legend">"#);
    for (i, job) in t.jobs.iter().enumerate() {
        let last = job.points.last().map_or(0.0, |p| p.1);
        let _ = write!(
            out,
            r#"<li><span class="swatch" style="background:{}"></span>{} (job {}): {} elements/s now</li>"#,
            COLOURS[i % COLOURS.len()],
            escape(&job.name),
            job.job_id,
            short(last)
        );
    }
    out.push_str("</ul>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status_page::view::JobSeries;

    #[test]
    fn axis_maxima_are_round_and_paths_stay_inside_the_plot() {
        assert_eq!(round_up(0.0), 1.0);
        assert_eq!(round_up(7.0), 10.0);
        assert_eq!(round_up(120.0), 200.0);
        assert_eq!(short(1500.0), "1.5k");
        let t = Throughput {
            interval_secs: 5.0,
            span_secs: 30.0,
            jobs: vec![JobSeries {
                job_id: 3,
                name: "a<b".into(),
                points: vec![(10.0, 40.0), (0.0, 80.0)],
            }],
            jobs_omitted: 0,
        };
        let svg = svg(&t);
        // 80/s on a 0..100 axis; "now" at the right edge, 10 s ago at 5/6 of a minute.
        assert!(svg.contains(r#"d="M602.3,121.6 L710.0,47.2""#), "{svg}");
        assert!(svg.contains("a&lt;b") && !svg.contains("a<b"), "{svg}");
    }
}
