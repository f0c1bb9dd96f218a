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
    #[command(flatten)]
    telemetry: cmd::telemetry::TelemetryFlags,
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
    /// Config files (`--config FILE`): `sluice config check` validates one.
    Config(cmd::config::check::ConfigArgs),
}

impl Command {
    /// The role in the default `service.name` of exported spans (`sluice-ROLE`).
    fn role(&self) -> &'static str {
        match self {
            Command::Dispatcher(_) => "dispatcher",
            Command::Worker(_) => "worker",
            Command::Register(_) => "register",
            Command::Read(_) => "read",
            Command::Status(_) => "status",
            Command::Local(_) => "local",
            Command::SampleData(_) => "sample-data",
            Command::Bench(_) => "bench",
            Command::Chaos(_) => "chaos",
            Command::Config(_) => "config",
            Command::Admin(_) => "admin",
        }
    }
}

fn main() -> std::process::ExitCode {
    // The command line, the environment and the `--config` file, merged.
    let cli: Cli = cmd::config::parse();
    // openraft logs every unreachable peer at ERROR; servers keep its warnings,
    // `local` (whose nodes stop one after another) keeps none by default.
    let default_level = match cli.command {
        Command::Dispatcher(_) | Command::Worker(_) => "info,openraft=warn",
        Command::Local(_) => "warn,openraft=off",
        Command::Bench(_) => "warn,openraft=off,sluice_bench=info",
        Command::Chaos(_) => "warn,openraft=off,sluice_chaos=info",
        _ => "warn",
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the span exporter's channel runs on it.
    let telemetry =
        match runtime.block_on(async { cli.telemetry.init(cli.command.role(), default_level) }) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e:#}");
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
            Command::Config(a) => cmd::config::check::run(a, cmd::config::command::<Cli>()),
        }
    });
    // The last spans (a read's, ended just now) go out before the runtime stops.
    telemetry.shutdown();
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
