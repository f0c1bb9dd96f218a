//! The table's sections, one function each, in the order `Report::render` calls
//! them; each writes its heading and rows.

use crate::limits::Bandwidth;
use crate::measure::{ms, Latency, Outcome};

use super::{Report, STREAM_ROWS};

/// The table being written, one line at a time.
#[derive(Default)]
pub(super) struct Lines(pub String);

impl Lines {
    pub(super) fn line(&mut self, s: String) {
        self.0.push_str(&s);
        self.0.push('\n');
    }
}

/// The run: date, build, machine, load, where the files went.
pub(super) fn header(r: &Report, out: &mut Lines) {
    let m = &r.machine;
    out.line(format!("sluice bench  {}  ({} build)", m.date_utc, m.build));
    out.line(format!("machine: {} cores, {}, Linux {}", m.nproc, m.cpu, m.kernel));
    out.line(format!("load average: {} at the start, {} at the end", m.load_start, m.load_end));
    out.line(format!("bench dir: {} ({})", m.bench_dir, m.bench_dir_fs));
    out.line(match m.snapshot_every {
        Some(n) => format!("snapshots: every {n} log entries"),
        None => "snapshots: the dispatcher's default (every 10000 log entries on sled and \
                 in memory, 1000 on S3)"
            .into(),
    });
}

/// PHYSICAL LIMITS: loopback and memcpy bandwidth, fsync, journal appends, S3 PUT.
pub(super) fn limits(r: &Report, out: &mut Lines) {
    let m = &r.machine;
    out.line("PHYSICAL LIMITS".into());
    out.line(format!(
        "  {:<44} {}",
        "loopback TCP (1 sender, 1 receiver, 1 MiB)",
        show_bandwidth(&r.loopback)
    ));
    out.line(format!(
        "  {:<44} {}",
        format!("loopback TCP ({} streams at once, 1 MiB)", crate::streaming::WORKERS),
        show_bandwidth(&r.loopback_streams)
    ));
    out.line(format!("  {:<44} {}", "memcpy (64 MiB buffer, 1 thread)", show_bandwidth(&r.memcpy)));
    let limits = [
        ("fsync (append 4 KiB + sync_all)".to_string(), &r.fsync),
        ("sled journal append, 1 entry of 128 B".to_string(), &r.sled_append_1),
        (format!("sled journal append, {} entries at once", m.workers), &r.sled_append_batch),
        ("S3 PUT (4 KiB, create-if-absent, moto)".to_string(), &r.s3_put),
    ];
    for (what, latency) in limits {
        out.line(format!("  {what:<44} {}", show_latency(latency)));
    }
}

/// STREAMING: OFF reads through worker processes, against loopback and memcpy.
pub(super) fn streaming(r: &Report, out: &mut Lines) {
    out.line(format!(
        "STREAMING  (OFF, {} worker processes, in-memory dispatcher; read one element at a \
         time through the client's ElementStream in the bench process)",
        crate::streaming::WORKERS
    ));
    out.line(
        "  rates from the first element to the last; CPU = user+system over the read, per \
         element; `x lo`: GB/s over the loopback bandwidth of as many streams at once as \
         workers (one connection each); `x mem`: over memcpy"
            .into(),
    );
    out.line(format!(
        "  {:<32} {:>9} {:>6} {:>11} {:>7} {:>12} {:>13} {:>6} {:>6}  {}",
        "case",
        "elements",
        "secs",
        "elements/s",
        "GB/s",
        "reader µs/el",
        "workers µs/el",
        "x lo",
        "x mem",
        "exactly-once"
    ));
    let ratio = |gb: f64, limit: &Outcome<Bandwidth>| {
        limit.measured().map(|l| format!("{:.2}", gb / l.gb_per_s)).unwrap_or("-".into())
    };
    for (name, row) in STREAM_ROWS.iter().zip(&r.streaming) {
        match row {
            Outcome::Measured(c) => out.line(format!(
                "  {:<32} {:>9} {:>6.2} {:>11.0} {:>7.3} {:>12.2} {:>13.2} {:>6} {:>6}  {}",
                c.name,
                c.elements,
                c.secs,
                c.elements_per_s,
                c.gb_per_s,
                c.reader_cpu_us_per_element,
                c.workers_cpu_us_per_element,
                ratio(c.gb_per_s, &r.loopback_streams),
                ratio(c.gb_per_s, &r.memcpy),
                c.exactly_once
            )),
            other => out.line(format!("  {name:<32} {}", not_measured(other))),
        }
    }
}

/// END OF EPOCH: last element to end of stream at the reader.
pub(super) fn epoch(r: &Report, out: &mut Lines) {
    out.line(format!(
        "END OF EPOCH  (last element -> end of stream at the reader; range({}) on the same \
         processes, DYNAMIC 1000 elements per split)",
        crate::epoch::ELEMENTS
    ));
    match &r.epoch {
        Outcome::Measured(epoch) => {
            for c in &epoch.cases {
                out.line(format!(
                    "  {:<8} median {}  max {}  ({} runs)  elements per run: {}",
                    c.mode,
                    ms(c.end_after_last.median_ms),
                    ms(c.end_after_last.max_ms),
                    c.runs,
                    if c.ok() { "ok".to_string() } else { format!("WRONG {:?}", c.elements) }
                ));
            }
        }
        other => out.line(format!("  {}", not_measured(other))),
    }
}

/// COMMITTED GET-SPLIT RATE: one row per journal and batch size.
pub(super) fn splits(r: &Report, out: &mut Lines) {
    let m = &r.machine;
    out.line(format!(
        "COMMITTED GET-SPLIT RATE  (elements_per_split = 1, range({}), DYNAMIC, {} lanes, {} s budget)",
        m.elements, m.workers, m.budget_s
    ));
    out.line(format!(
        "  {:<30} {:>8} {:>9} {:>26}   {:<16} {:>11} {:>12}  {}",
        "case",
        "splits",
        "splits/s",
        "call latency",
        "limit",
        "splits/lim",
        "splits/appnd",
        "exactly-once"
    ));
    for (name, row) in r.split_rows.iter().zip(&r.splits) {
        match row {
            Outcome::Measured(c) => out.line(format!(
                "  {:<30} {:>8} {:>9.0} {:>26}   {:<16} {:>11} {:>12}  {}",
                c.name,
                c.run.splits,
                c.run.splits_per_s,
                c.run.call.map(|l| l.show()).unwrap_or_else(|| "-".into()),
                match (&c.limit, c.journal.as_str()) {
                    (Some(limit), _) => limit.clone(),
                    (None, "memory://") => "none (memory)".into(),
                    (None, _) => "not measured".into(),
                },
                c.splits_per_limit.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                c.splits_per_append.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                c.exactly_once.describe()
            )),
            other => out.line(format!("  {name:<30} {}", not_measured(other))),
        }
    }
    for c in r.splits.iter().filter_map(Outcome::measured) {
        if !c.run.errors.is_empty() {
            out.line(format!("  {}: errors: {}", c.name, c.run.errors.join("; ")));
        }
    }
}

/// LEADER FAILOVER: SIGKILL the leader under split load.
pub(super) fn failover(r: &Report, out: &mut Lines) {
    out.line("LEADER FAILOVER  (3 nodes, sled, processes; SIGKILL the leader under load)".into());
    match &r.failover {
        Outcome::Measured(f) => {
            let opt = |v: Option<f64>| v.map(ms).unwrap_or_else(|| "none".into());
            out.line(format!(
                "  killed leader node {} after {:.1} s; new leader: {}, reported {} after the kill",
                f.killed_node,
                f.killed_after_s,
                f.new_leader.map(|l| format!("node {l}")).unwrap_or_else(|| "none".into()),
                opt(f.new_leader_after_ms)
            ));
            out.line(format!(
                "  kill -> first split answered to a request sent after it: {}   \
                 longest gap between answered splits: {}",
                opt(f.first_split_after_kill_ms),
                ms(f.longest_gap_ms)
            ));
            out.line(format!(
                "  splits: {} ({} answered after the kill, {} of them requested before it)   \
                 exactly-once across the kill: {}",
                f.run.splits,
                f.splits_after_kill,
                f.in_flight_after_kill,
                f.exactly_once.describe()
            ));
            out.line(format!("  lanes retry with {}", f.retry_policy));
        }
        other => out.line(format!("  {}", not_measured(other))),
    }
}

/// LEADER SIGKILL UNDER A READER: the longest gap in element arrivals.
pub(super) fn gap(r: &Report, out: &mut Lines) {
    out.line(
        "LEADER SIGKILL UNDER A READER  (3 dispatcher processes on sled, 2 worker processes, \
         DYNAMIC reader)"
            .into(),
    );
    match &r.gap {
        Outcome::Measured(g) => {
            out.line(format!(
                "  range({}), {} elements per split, workers ask {} splits per request; \
                 {:.0} elements/s over the whole read ({:.2} s)",
                g.elements,
                g.elements_per_split,
                g.worker_splits_per_request,
                g.elements_per_s,
                g.secs
            ));
            out.line(format!(
                "  killed leader node {} {:.2} s after the first element ({} elements read); \
                 new leader reported {} after the kill",
                g.killed_node,
                g.killed_after_s,
                g.elements_before_kill,
                g.new_leader_after_ms.map(ms).unwrap_or_else(|| "never".into())
            ));
            out.line(format!(
                "  longest gap between element arrivals: {} (began {} {} the kill)   \
                 exactly-once: {}",
                ms(g.longest_gap_ms),
                ms(g.longest_gap_began_ms.abs()),
                if g.longest_gap_began_ms < 0.0 { "before" } else { "after" },
                g.exactly_once
            ));
        }
        other => out.line(format!("  {}", not_measured(other))),
    }
    match &r.gap_read {
        Outcome::Measured(cycles) => cycles.render(ms).into_iter().for_each(|l| out.line(l)),
        other => out.line(format!("  `sluice read` cycles: {}", not_measured(other))),
    }
}

/// IDLE RSS of a dispatcher and a worker.
pub(super) fn rss(r: &Report, out: &mut Lines) {
    out.line("IDLE RSS  (VmRSS; dispatcher in memory, 1 worker)".into());
    match &r.rss {
        Outcome::Measured(r) => {
            let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
            out.line(format!(
                "  dispatcher: {} after start, {} after a job   worker: {} after start, {} \
                 after a job   (job: {})",
                mb(r.dispatcher_after_start),
                mb(r.dispatcher_after_job),
                mb(r.worker_after_start),
                mb(r.worker_after_job),
                r.job
            ));
        }
        other => out.line(format!("  {}", not_measured(other))),
    }
    match &r.rss_specs {
        Outcome::Measured(rows) => {
            let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
            for s in rows {
                let target = crate::rss_specs::TARGET_RATIO;
                let met = if s.ratio() <= target { "met" } else { "UNMET" };
                out.line(format!(
                    "  dispatcher ({}) holding {} definitions of {}: {} before, {} peak, {} after; \
                     growth {:.2}x their bytes (target <= {target}x: {met})",
                    s.journal,
                    s.specs,
                    mb(s.spec_bytes),
                    mb(s.before),
                    mb(s.peak),
                    mb(s.after),
                    s.ratio()
                ));
            }
        }
        other => out.line(format!("  definitions: {}", not_measured(other))),
    }
}

/// RESTART: one node killed and restarted on its work_dir.
pub(super) fn restart(r: &Report, out: &mut Lines) {
    out.line(
        "RESTART  (1 node, sled, process; SIGKILL, restart on the same work_dir and port)".into(),
    );
    match &r.restart {
        Outcome::Measured(r) => {
            let done = if r.fill_complete {
                String::new()
            } else {
                format!(
                    "  -- ONLY {} OF {} within --restart-timeout-secs",
                    r.fill.splits, r.splits_requested
                )
            };
            out.line(format!(
                "  handed out {} splits in {:.1} s ({:.0} splits/s, call {}){}",
                r.fill.splits,
                r.fill.elapsed_s,
                r.fill.splits_per_s,
                r.fill.call.map(|l| l.show()).unwrap_or_else(|| "-".into()),
                done
            ));
            let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
            out.line(format!(
                "  journal: {:.1} MiB on disk ({:.1} MiB apparent); last log index {}, snapshot at {}",
                r.journal_bytes_on_disk as f64 / 1048576.0,
                r.journal_bytes_apparent as f64 / 1048576.0,
                opt(r.last_log_index),
                opt(r.snapshot_index)
            ));
            out.line(format!(
                "  spawn -> listening: {}   spawn -> first split answered: {}",
                ms(r.listening_ms),
                ms(r.first_split_ms)
            ));
            let cursor =
                if r.next_split_begin == r.handed_out_before_kill { "ok" } else { "WRONG" };
            out.line(format!(
                "  next split began at {} (handed out before the kill: {}): {}   exactly-once: {}",
                r.next_split_begin,
                r.handed_out_before_kill,
                cursor,
                r.exactly_once.describe()
            ));
        }
        other => out.line(format!("  {}", not_measured(other))),
    }
}

/// FILE PIPELINES: real file pipelines against a local read and the loopback limit.
pub(super) fn files(r: &Report, out: &mut Lines) {
    match &r.files {
        Outcome::Measured(f) => {
            out.line(format!(
                "FILE PIPELINES  ({} TFRecord files, {} records, {:.1} MB, {}x{} PNG + label per \
                 record; {} text files, {} lines, {:.1} MB; DYNAMIC, a split is a file; worker \
                 processes on loopback)",
                f.files,
                f.records,
                f.dataset_bytes as f64 / 1e6,
                f.image_size,
                f.image_size,
                f.text_files,
                f.text_lines,
                f.text_bytes as f64 / 1e6,
            ));
            out.line(
                "  rates from the first element to the last; `1st element` includes job \
                 creation and the workers starting their tasks; limit = min(local MB/s, \
                 loopback of as many streams); pipe = the TFRecord files read and sent over \
                 as many loopback streams by plain threads (file read and both socket copies \
                 on the same cores); CPU µs per record of the workers / this process"
                    .into(),
            );
            out.line(format!(
                "  pipe: TFRecord files over loopback, 1 stream {}; 2 streams {}",
                show_bandwidth(&f.pipe_one),
                show_bandwidth(&f.pipe_two)
            ));
            cases_table(&f.cases, out);
        }
        other => out.line(format!("FILE PIPELINES  {}", not_measured(other))),
    }
}

/// The rows of a file-pipeline comparison (files, parquet, webdataset).
fn cases_table(cases: &[crate::files::FilesCase], out: &mut Lines) {
    out.line(format!(
        "  {:<24} {:<18} {:>8} {:>9} {:>6} {:>10} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>13}",
        "pipeline",
        "setup",
        "records",
        "1st el.",
        "secs",
        "records/s",
        "MB/s",
        "vs local",
        "limit",
        "vs limit",
        "pipe",
        "vs pipe",
        "CPU wrk/rdr"
    ));
    let x = |v: Option<f64>| v.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into());
    for c in cases {
        let cpu = match c.worker_cpu_us_per_record {
            Some(w) => format!("{w:.1} / {:.1}", c.reader_cpu_us_per_record),
            None => format!("- / {:.1}", c.reader_cpu_us_per_record),
        };
        out.line(format!(
            "  {:<24} {:<18} {:>8} {:>9} {:>6.2} {:>10.0} {:>8.1} {:>8} {:>8} {:>8} {:>7} {:>7} {:>13}",
            c.pipeline,
            c.setup,
            c.records,
            ms(c.first_element_s * 1e3),
            c.secs,
            c.records_per_s,
            c.mb_per_s,
            x(c.vs_local),
            c.limit_mb_per_s.map(|l| format!("{l:.0}")).unwrap_or_else(|| "-".into()),
            x(c.vs_limit),
            c.pipe_mb_per_s.map(|l| format!("{l:.0}")).unwrap_or_else(|| "-".into()),
            x(c.vs_pipe),
            cpu
        ));
    }
}

fn format_rows(title: &str, o: &Outcome<crate::formats::FormatRows>, out: &mut Lines) {
    match o {
        Outcome::Measured(f) => {
            out.line(format!("{title}  ({}; DYNAMIC, worker processes on loopback)", f.data));
            out.line(
                "  local = the same crates reading the same files in this process; target: \
                 service records/s >= 0.8x local; CPU µs per record of the workers / this \
                 process; pipe = the files section's TFRecord files over loopback"
                    .into(),
            );
            cases_table(&f.cases, out);
        }
        other => out.line(format!("{title}  {}", not_measured(other))),
    }
}

/// PARQUET: rows and 1024-row batches, local against the service (a split is a row group).
pub(super) fn parquet(r: &Report, out: &mut Lines) {
    format_rows("PARQUET", &r.parquet, out);
}

/// WEBDATASET: samples, local against the service (a split is a shard).
pub(super) fn webdataset(r: &Report, out: &mut Lines) {
    format_rows("WEBDATASET", &r.webdataset, out);
}

/// JPEG: Sluice's image maps against Pillow + numpy, per core and on 2 cores.
pub(super) fn jpeg(r: &Report, out: &mut Lines) {
    match &r.jpeg {
        Outcome::Measured(j) => {
            out.line(format!(
                "JPEG  ({}; decode -> random_resized_crop 224x224 -> random_flip -> normalize to \
                 float32 CHW)",
                j.data
            ));
            let peer = j.peer.as_deref().unwrap_or("Pillow not run");
            let vs = |o: &Outcome<crate::formats::Rate>, ours: f64| match o {
                Outcome::Measured(p) => {
                    format!("{:.0}, Sluice {:.2}x", p.images_per_s, ours / p.images_per_s)
                }
                other => not_measured(other),
            };
            out.line(format!(
                "  per core (images per CPU second; target Sluice >= 1.5x Pillow): Sluice {:.0}; \
                 Pillow+numpy in one Python thread ({peer}) with draft DCT scaling {}; \
                 decoding at full size as Sluice does {}",
                j.sluice_per_core,
                vs(&j.pillow_per_core, j.sluice_per_core),
                vs(&j.pillow_full_decode_per_core, j.sluice_per_core)
            ));
            let pool = match &j.pillow_pool_two {
                Outcome::Measured(p) => format!(
                    "{:.0} images/s (Sluice {:.2}x)",
                    p.images_per_s,
                    j.sluice_two_workers / p.images_per_s
                ),
                other => not_measured(other),
            };
            out.line(format!(
                "  to a trainer in batches of {} on 2 cores: Sluice, 2 workers {:.0} images/s \
                 ({:.0} µs worker CPU per image); 2 Pillow processes (what \
                 DataLoader(num_workers=2) runs) {pool}",
                crate::formats::BATCH,
                j.sluice_two_workers,
                j.sluice_worker_cpu_us
            ));
        }
        other => out.line(format!("JPEG  {}", not_measured(other))),
    }
}

fn show_bandwidth(o: &Outcome<Bandwidth>) -> String {
    match o {
        Outcome::Measured(b) => {
            format!("{:.2} GB/s  ({:.2} GB in {:.2} s)", b.gb_per_s, b.bytes as f64 / 1e9, b.secs)
        }
        other => not_measured(other),
    }
}

fn show_latency(o: &Outcome<Latency>) -> String {
    match o {
        Outcome::Measured(l) => format!("{}  ({} samples)", l.show(), l.samples),
        other => not_measured(other),
    }
}

fn not_measured<T>(o: &Outcome<T>) -> String {
    match o {
        Outcome::Measured(_) => String::new(),
        Outcome::Skipped { reason } => format!("skipped: {reason}"),
        Outcome::Failed { error } => format!("FAILED: {error}"),
    }
}

/// PYTHON STAGES: a user's Python function per element, against the built-in Rust
/// map and the pipe to the Python processes.
pub(super) fn python(r: &Report, out: &mut Lines) {
    match &r.python {
        Outcome::Measured(p) => {
            out.line(format!(
                "PYTHON STAGES  (in-process pipeline over range({}), identity functions by \
                 reference; map_batches in batches of {}; {})",
                p.elements, p.batch_size, p.interpreter
            ));
            out.line(format!(
                "  {:<10} {:>16} {:>14} {:>15} {:>16} {:>19}",
                "processes",
                "pipe MiB/s/way",
                "Rust map µs",
                "Python map µs",
                "map overhead µs",
                "map_batches µs"
            ));
            for row in &p.rows {
                out.line(format!(
                    "  {:<10} {:>16.0} {:>14.2} {:>15.2} {:>16.2} {:>19.2}",
                    row.processes,
                    row.pipe_mib_per_s,
                    row.rust_map_us,
                    row.python_map_us,
                    row.python_map_us - row.rust_map_us,
                    row.map_batches_us
                ));
            }
        }
        other => out.line(format!("PYTHON STAGES  {}", not_measured(other))),
    }
}

/// COMPRESSION: token ids and random bytes through a capped link, none vs zstd.
pub(super) fn compression(r: &Report, out: &mut Lines) {
    match &r.compression {
        Outcome::Measured(c) => {
            out.line(format!(
                "COMPRESSION  ({} MB per case; OFF, 1 worker process behind a capped proxy on \
                 loopback; MB/s = payload delivered; CPU s over the read)",
                c.mb
            ));
            out.line(format!(
                "  {:<18} {:<10} {:>9} {:<6} {:>11} {:>9} {:>8} {:>7} {:>10} {:>10}",
                "data",
                "link",
                "cap MB/s",
                "codec",
                "elements/s",
                "MB/s",
                "wire MB",
                "ratio",
                "worker CPU",
                "reader CPU"
            ));
            for k in &c.cases {
                out.line(format!(
                    "  {:<18} {:<10} {:>9} {:<6} {:>11.0} {:>9.1} {:>8.1} {:>7.2} {:>10.2} {:>10.2}",
                    k.data,
                    k.link,
                    k.cap_mb_per_s.map(|c| format!("{c:.0}")).unwrap_or_else(|| "-".into()),
                    k.compression,
                    k.elements_per_s,
                    k.mb_per_s,
                    k.wire_bytes as f64 / 1e6,
                    k.ratio,
                    k.worker_cpu_s,
                    k.reader_cpu_s
                ));
            }
        }
        other => out.line(format!("COMPRESSION  {}", not_measured(other))),
    }
}

/// EXACTLY-ONCE: the cost of tracking positions, their size, and a restore.
pub(super) fn exactly_once(r: &Report, out: &mut Lines) {
    match &r.exactly_once {
        Outcome::Measured(e) => crate::eo_report::lines(e, |l| out.line(l)),
        other => out.line(format!("EXACTLY-ONCE  {}", not_measured(other))),
    }
}

/// SCALE: the simulated fleet against three nodes (`crate::scale::report`).
pub(super) fn scale(r: &Report, out: &mut Lines) {
    crate::scale::report::render(&r.scale, &mut |l| out.line(l));
}
