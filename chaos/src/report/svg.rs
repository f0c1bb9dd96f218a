//! The throughput-over-time chart of one run, drawn with plotters' SVG backend.
//!
//! Text needs no system fonts: without plotters' `ttf` feature, text widths
//! are only estimated for layout and every label is written as an SVG `<text>`
//! element that the viewer renders with its own sans-serif font, so the chart
//! builds and renders the same on CI as on a laptop.
//!
//! What is drawn: elements/s over all consumers in 250 ms buckets (a step line);
//! each fault as a shaded span from its `FaultStart` to its `FaultEnd` (to the
//! end of the chart if it never healed) with a line at its start and a label
//! "#id kind" in the first free lane above the data; each epoch's end (its last
//! consumer's `EpochEnd`) as a dashed vertical line, red if a consumer's read of
//! it ended with an error; a legend strip under the chart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::history::{Event, Fault, Millis};

const BUCKET_MS: u64 = 250;
const HEIGHT: u32 = 560;
const LEGEND_HEIGHT: u32 = 34;
/// Width of the y axis' label area, in pixels.
const Y_LABEL_AREA: u32 = 80;
const LANE_PX: f64 = 18.0;
/// Fault labels beyond this many lanes are left out (the span is still shaded).
const MAX_LANES: usize = 8;
const LABEL_FONT: u32 = 14;

const THROUGHPUT: RGBColor = RGBColor(31, 119, 180);
const EPOCH_END: RGBColor = RGBColor(60, 60, 60);
const EPOCH_ERROR: RGBColor = RGBColor(200, 0, 0);

/// Writes an SVG chart of throughput over time (elements/s in 250 ms buckets,
/// all consumers) with every fault drawn as a labelled shaded span from
/// FaultStart to FaultEnd, and epoch ends marked; returns the path
/// (`<name>.svg` in `dir`).
pub fn write_chart(dir: &Path, name: &str, events: &[Event]) -> std::io::Result<PathBuf> {
    let data = ChartData::from_events(events);
    let width = ((200.0 + data.x_max * 25.0) as u32).clamp(1000, 3000);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, HEIGHT)).into_drawing_area();
        draw(&root, name, &data).map_err(|e| std::io::Error::other(e.to_string()))?;
        root.present().map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    let path = dir.join(format!("{name}.svg"));
    std::fs::write(&path, svg)?;
    Ok(path)
}

/// Fault spans are coloured by what they hit.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Category {
    DispatcherProcess,
    Network,
    S3,
    Worker,
}

impl Category {
    fn of(fault: &Fault) -> Category {
        match fault {
            Fault::Partition { .. } | Fault::Delay { .. } | Fault::Drop { .. } => Category::Network,
            Fault::S3Slow { .. } | Fault::S3Down => Category::S3,
            Fault::KillWorker { .. } | Fault::WorkerKilled { .. } | Fault::WorkerDrained { .. } => {
                Category::Worker
            }
            _ => Category::DispatcherProcess,
        }
    }

    fn color(self) -> RGBColor {
        match self {
            Category::DispatcherProcess => RGBColor(214, 39, 40),
            Category::Network => RGBColor(148, 103, 189),
            Category::S3 => RGBColor(44, 160, 44),
            Category::Worker => RGBColor(255, 127, 14),
        }
    }

    fn legend(self) -> &'static str {
        match self {
            Category::DispatcherProcess => "dispatcher fault",
            Category::Network => "network fault",
            Category::S3 => "S3 fault",
            Category::Worker => "worker kill",
        }
    }
}

struct FaultBar {
    label: String,
    category: Category,
    start: f64,
    end: f64,
}

/// The history reduced to what the chart shows, times in seconds.
struct ChartData {
    title: String,
    /// (bucket start, elements/s).
    rates: Vec<(f64, f64)>,
    faults: Vec<FaultBar>,
    /// (epoch, time of its last end, some consumer ended with an error).
    epoch_ends: Vec<(u32, f64, bool)>,
    x_max: f64,
}

impl ChartData {
    fn from_events(events: &[Event]) -> ChartData {
        let secs = |ms: Millis| ms as f64 / 1000.0;
        let last = events.iter().filter_map(time).max().unwrap_or(0);
        let x_max = secs(last).max(1.0) * 1.02;
        let mut buckets = vec![0u64; (last / BUCKET_MS + 1) as usize];
        let mut ends: BTreeMap<u32, (Millis, bool)> = BTreeMap::new();
        let mut starts: BTreeMap<u32, (Millis, &Fault)> = BTreeMap::new();
        let mut faults = Vec::new();
        let mut title = String::from("chaos run");
        for event in events {
            match event {
                Event::Start { seed, scenario, mode, dataset_len, workers, consumers, .. } => {
                    title = format!(
                        "{scenario}, seed {seed}: {mode}, range({dataset_len}), {workers} \
                         workers, {consumers} consumers"
                    );
                }
                Event::Element { t_ms, .. } => buckets[(t_ms / BUCKET_MS) as usize] += 1,
                Event::EpochEnd { t_ms, epoch, outcome, .. } => {
                    let entry = ends.entry(*epoch).or_insert((0, false));
                    entry.0 = entry.0.max(*t_ms);
                    entry.1 |= outcome != "end";
                }
                Event::FaultStart { t_ms, id, fault } => {
                    starts.insert(*id, (*t_ms, fault));
                }
                Event::FaultEnd { t_ms, id } => {
                    if let Some((start, fault)) = starts.remove(id) {
                        faults.push(FaultBar::new(*id, fault, secs(start), secs(*t_ms)));
                    }
                }
                Event::Registry { .. }
                | Event::Checkpoint { .. }
                | Event::Restore { .. }
                | Event::JobStart { .. }
                | Event::JobEnd { .. }
                | Event::WorkerUp { .. } => {}
            }
        }
        for (id, (start, fault)) in starts {
            faults.push(FaultBar::new(id, fault, secs(start), x_max));
        }
        faults.sort_by(|a, b| a.start.total_cmp(&b.start));
        let per_second = 1000.0 / BUCKET_MS as f64;
        let rates = buckets
            .iter()
            .enumerate()
            .map(|(i, n)| (secs(i as u64 * BUCKET_MS), *n as f64 * per_second))
            .collect();
        let epoch_ends = ends.into_iter().map(|(e, (t, error))| (e, secs(t), error)).collect();
        ChartData { title, rates, faults, epoch_ends, x_max }
    }
}

impl FaultBar {
    fn new(id: u32, fault: &Fault, start: f64, end: f64) -> FaultBar {
        FaultBar {
            label: format!("#{id} {}", fault.kind_name()),
            category: Category::of(fault),
            start,
            end,
        }
    }
}

fn time(event: &Event) -> Option<Millis> {
    event.t_ms()
}

type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw(root: &DrawingArea<SVGBackend, Shift>, name: &str, data: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_vertically(HEIGHT - LEGEND_HEIGHT);
    // The plot spans the width less the y label area and both margins.
    let plot_px = (root.dim_in_pixel().0 - Y_LABEL_AREA - 24) as f64;
    let s_per_px = data.x_max / plot_px;

    // Labels go in lanes above the data: a label takes a lane from its span's
    // start to the end of its span or its text, whichever is later.
    let mut lane_ends: Vec<f64> = Vec::new();
    let lanes: Vec<Option<usize>> = data
        .faults
        .iter()
        .map(|f| {
            let text_start = label_x(f, data.x_max, s_per_px);
            let text_end = text_start + text_px(&f.label, LABEL_FONT) * s_per_px;
            let busy_until = f.end.max(text_end);
            let lane = lane_ends.iter().position(|end| *end <= text_start.min(f.start));
            match lane {
                Some(l) => lane_ends[l] = busy_until,
                None if lane_ends.len() < MAX_LANES => lane_ends.push(busy_until),
                None => return None,
            }
            lane.or(Some(lane_ends.len() - 1))
        })
        .collect();
    let omitted = lanes.iter().filter(|l| l.is_none()).count();

    let plot_height_px = (HEIGHT - LEGEND_HEIGHT - 110) as f64;
    let data_max = data.rates.iter().map(|r| r.1).fold(0.0, f64::max).max(4.0) * 1.05;
    let label_fraction = ((lane_ends.len() as f64 * LANE_PX + 6.0) / plot_height_px).min(0.6);
    let y_top = data_max / (1.0 - label_fraction);
    let lane_y = |lane: usize| y_top * (1.0 - (lane as f64 * LANE_PX + 3.0) / plot_height_px);

    let caption = if omitted > 0 {
        format!("{name} — {} ({omitted} fault labels left out)", data.title)
    } else {
        format!("{name} — {}", data.title)
    };
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(0f64..data.x_max, 0f64..y_top)?;
    chart
        .configure_mesh()
        .x_desc("time since the run started (s)")
        .y_desc("elements/s, all consumers (250 ms buckets)")
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .light_line_style(RGBColor(235, 235, 235))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| {
            if data.x_max > 20.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        })
        .draw()?;

    let min_width = 2.0 * s_per_px;
    for fault in &data.faults {
        let color = fault.category.color();
        let end = fault.end.max(fault.start + min_width);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(fault.start, 0.0), (end, y_top)],
            color.mix(0.15).filled(),
        )))?;
        chart.draw_series(LineSeries::new(
            [(fault.start, 0.0), (fault.start, y_top)],
            color.mix(0.8).stroke_width(1),
        ))?;
    }
    let steps =
        data.rates.iter().flat_map(|(t, r)| [(*t, *r), (t + BUCKET_MS as f64 / 1000.0, *r)]);
    chart.draw_series(LineSeries::new(steps, THROUGHPUT.stroke_width(2)))?;

    let mut last_label_x = f64::NEG_INFINITY;
    for (epoch, t, error) in &data.epoch_ends {
        let color = if *error { EPOCH_ERROR } else { EPOCH_END };
        chart.draw_series(DashedLineSeries::new(
            [(*t, 0.0), (*t, y_top)],
            6,
            4,
            color.stroke_width(if *error { 2 } else { 1 }),
        ))?;
        if (t - last_label_x) / s_per_px > 70.0 {
            last_label_x = *t;
            let text =
                if *error { format!("epoch {epoch} error") } else { format!("epoch {epoch} end") };
            let style = ("sans-serif", 12)
                .into_font()
                .color(&color)
                .pos(Pos::new(HPos::Right, VPos::Bottom));
            chart.draw_series(std::iter::once(Text::new(
                text,
                (t - 3.0 * s_per_px, y_top * 0.01),
                style,
            )))?;
        }
    }
    for (fault, lane) in data.faults.iter().zip(&lanes) {
        let Some(lane) = lane else { continue };
        let color = fault.category.color();
        let style = ("sans-serif", LABEL_FONT)
            .into_font()
            .color(&RGBColor(color.0 / 2, color.1 / 2, color.2 / 2))
            .pos(Pos::new(HPos::Left, VPos::Top));
        chart.draw_series(std::iter::once(Text::new(
            fault.label.clone(),
            (label_x(fault, data.x_max, s_per_px), lane_y(*lane)),
            style,
        )))?;
    }
    draw_legend(&legend_area, data)
}

/// One row under the chart: the line, the epoch marker, and each fault colour
/// that appears.
fn draw_legend(area: &DrawingArea<SVGBackend, Shift>, data: &ChartData) -> DrawResult {
    const FONT: u32 = 13;
    let y = (LEGEND_HEIGHT / 2) as i32;
    let font =
        ("sans-serif", FONT).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    let mut x = 20;
    let entry = |x: &mut i32, text: &str| -> DrawResult {
        area.draw(&Text::new(text.to_string(), (*x + 30, y), font.clone()))?;
        *x += 30 + text_px(text, FONT) as i32 + 24;
        Ok(())
    };
    area.draw(&PathElement::new([(x, y), (x + 24, y)], THROUGHPUT.stroke_width(2)))?;
    entry(&mut x, "elements/s")?;
    area.draw(&PathElement::new([(x + 12, y - 8), (x + 12, y + 8)], EPOCH_END.stroke_width(1)))?;
    entry(&mut x, "epoch end (red: a read failed)")?;
    let mut categories: Vec<Category> = data.faults.iter().map(|f| f.category).collect();
    categories.sort();
    categories.dedup();
    for category in categories {
        let color = category.color();
        area.draw(&Rectangle::new([(x, y - 7), (x + 22, y + 7)], color.mix(0.3).filled()))?;
        entry(&mut x, category.legend())?;
    }
    Ok(())
}

/// A generous estimate of a label's width in pixels (the viewer picks the font).
fn text_px(text: &str, font_px: u32) -> f64 {
    text.chars().count() as f64 * font_px as f64 * 0.55 + 6.0
}

/// Where a fault's label starts: just right of the span's start, or pulled
/// left so that it ends inside the chart.
fn label_x(fault: &FaultBar, x_max: f64, s_per_px: f64) -> f64 {
    let width = text_px(&fault.label, LABEL_FONT) * s_per_px;
    (fault.start + 3.0 * s_per_px).min(x_max - width).max(0.0)
}
