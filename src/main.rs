//! `sluice`: one binary for every role. It parses flags and wires the crates
//! together; all behaviour lives in the crates.

mod cmd;

/// Large message buffers (encode on workers, decode on readers) are allocated and
/// freed once per message; glibc's malloc hands such blocks back to the kernel and
/// faults them in again, mimalloc reuses them (docs/performance.md, "what each
/// optimisation bought").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sluice", version, about = "Fault-tolerant input-data service for ML training")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a dispatcher (control plane).
    Dispatcher(cmd::serve::DispatcherArgs),
    /// Run a worker: runs pipelines and streams elements to readers.
    Worker(cmd::serve::WorkerArgs),
    /// Register a dataset from a JSON spec (file or `-` for stdin); prints its id.
    Register(cmd::register::RegisterArgs),
    /// Read a dataset; prints one JSON line per element on stdout.
    Read(cmd::read::ReadArgs),
    /// Show workers, datasets, jobs and progress.
    Status(cmd::status::StatusArgs),
    /// Change the dispatcher group: add or remove a dispatcher while it serves.
    Admin(cmd::admin::AdminArgs),
    /// Dispatcher, workers and a reader in one process over a sample dataset.
    Local(cmd::local::LocalArgs),
    /// Write a sample image data set (TFRecord files) and its preprocessing pipeline.
    SampleData(cmd::sample::SampleArgs),
    /// Measure committed split rate, failover and restart time (docs/performance.md).
    Bench(cmd::bench::BenchArgs),
    /// Kill, pause, partition and wipe a real cluster while reading; check the history (docs/chaos.md).
    Chaos(cmd::chaos::ChaosArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // openraft logs every unreachable peer at ERROR; servers keep its warnings,
    // `local` (whose nodes stop one after another) keeps none by default.
    let default_level = match cli.command {
        Command::Dispatcher(_) | Command::Worker(_) => "info,openraft=warn",
        Command::Local(_) => "warn,openraft=off",
        Command::Bench(_) => "warn,openraft=off,sluice_bench=info",
        Command::Chaos(_) => "warn,openraft=off,sluice_chaos=info",
        _ => "warn",
    };
    cmd::init_tracing(default_level);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Dispatcher(a) => cmd::serve::dispatcher(a).await,
            Command::Worker(a) => cmd::serve::worker(a).await,
            Command::Register(a) => cmd::register::run(a).await,
            Command::Read(a) => cmd::read::run(a).await,
            Command::Status(a) => cmd::status::run(a).await,
            Command::Admin(a) => cmd::admin::run(a).await,
            Command::Local(a) => cmd::local::run(a).await,
            Command::SampleData(a) => cmd::sample::run(a).await,
            Command::Bench(a) => cmd::bench::run(a).await,
            Command::Chaos(a) => cmd::chaos::run(a).await,
        }
    });
    // Background work (a best-effort release, a retrying call) must not hold the
    // process after its command is done.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
