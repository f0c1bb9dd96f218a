//! `--config FILE`: a TOML file whose keys are a subcommand's long flag names
//! (`work-dir = "/var/lib/sluice"`, `peers = ["1=a:5050", ...]`), flat at the top
//! level. Precedence: file < environment (`SLUICE_*`) < command line.
//!
//! The mechanism knows no flag by name: it reads the clap [`Command`], so a flag
//! added to any subcommand is a config key at once. How:
//! 1. parse the command line (flags and `SLUICE_*` variables), errors aside;
//! 2. turn each file key into `--key=value` arguments ([`file`]: unknown keys and
//!    wrong types are refused here, naming the key and the file);
//! 3. keep those of keys whose flag was neither on the command line nor in the
//!    environment (clap's `value_source`), put them right after the subcommand's
//!    name, and parse again.
//!
//! # Layout
//! - this module: [`command`] (every subcommand gains `--config`), [`parse`] (what
//!   `main` calls), [`resolve`] (the three steps above).
//! - [`file`]: the TOML file to arguments, with its checks.
//! - [`check`]: `sluice config check`, which prints the effective configuration.

pub mod check;
mod file;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command, CommandFactory, FromArgMatches};

pub use file::CONFIG_ARG;

/// The server roles, whose `--config` may also come from `SLUICE_CONFIG`. Other
/// subcommands take `--config` only as a flag, so a `SLUICE_CONFIG` exported for a
/// server does not feed a dispatcher's keys to `sluice status`.
pub const SERVER_ROLES: &[&str] = &["dispatcher", "worker", "local"];

/// `C`'s command with `--config` on every subcommand that has flags of its own
/// (not on those made of subcommands, such as `config`).
pub fn command<C: CommandFactory>() -> Command {
    let mut cmd = C::command();
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.has_subcommands())
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let server = SERVER_ROLES.contains(&name.as_str());
        cmd = cmd.mut_subcommand(&name, |s| s.arg(config_arg(server)));
    }
    // Propagates the global flags (`--log-format`, `--otlp-endpoint`, ...) into every
    // subcommand, so a file's keys cover them too.
    cmd.build();
    cmd
}

fn config_arg(server: bool) -> Arg {
    let arg = Arg::new(CONFIG_ARG)
        .long(CONFIG_ARG)
        .value_name("FILE")
        .value_parser(clap::value_parser!(PathBuf))
        .help(
            "TOML file of this command's flags: keys are the long flag names \
             (e.g. work-dir = \"/var/lib/sluice\"); the environment and the command \
             line override it (docs/operations-config.md)",
        );
    if server {
        arg.env("SLUICE_CONFIG")
    } else {
        arg
    }
}

/// `main`'s parse: the command line, the environment and the `--config` file,
/// merged. Exits like clap on a usage error, with status 2 on a bad config file.
pub fn parse<C: CommandFactory + FromArgMatches>() -> C {
    let resolved = match resolve(command::<C>(), std::env::args_os().collect()) {
        Ok(r) => r,
        Err(Error::Usage(e)) => e.exit(),
        Err(Error::File(e)) => {
            eprintln!("error: {e}");
            std::process::exit(2)
        }
    };
    C::from_arg_matches(&resolved.matches).unwrap_or_else(|e| e.exit())
}

/// Why a command line and its config file could not be merged.
#[derive(Debug)]
pub enum Error {
    /// A usage error clap reports (a bad flag, or values from the file that do not
    /// go together, e.g. two conflicting flags).
    Usage(clap::Error),
    /// The config file: missing, not TOML, an unknown key, a wrong type.
    File(String),
}

impl From<clap::Error> for Error {
    fn from(e: clap::Error) -> Error {
        Error::Usage(e)
    }
}

/// The merged arguments, and which of the subcommand's argument ids the file set.
pub struct Resolved {
    pub matches: ArgMatches,
    pub from_file: BTreeSet<String>,
}

/// Parses `argv` (with the program's name first), then applies the subcommand's
/// `--config` file below the command line and the environment.
pub fn resolve(cmd: Command, argv: Vec<OsString>) -> Result<Resolved, Error> {
    // The first parse only finds the file and what the command line and the
    // environment set: it ignores errors (`--help` still shows), because the file
    // may supply what the command line alone lacks (a flag another one requires).
    // The parse that counts is the last one.
    let first = cmd.clone().ignore_errors(true).try_get_matches_from(&argv)?;
    let unchanged = |cmd: Command| -> Result<Resolved, Error> {
        Ok(Resolved { matches: cmd.try_get_matches_from(&argv)?, from_file: BTreeSet::new() })
    };
    let Some((name, sub)) = first.subcommand() else { return unchanged(cmd) };
    let path = match sub.try_get_one::<PathBuf>(CONFIG_ARG) {
        Ok(Some(path)) => path.clone(),
        _ => return unchanged(cmd),
    };
    let sub_cmd = cmd.find_subcommand(name).expect("the parsed subcommand is defined");
    let settings = file::load(&path, sub_cmd).map_err(Error::File)?;
    let mut from_file = BTreeSet::new();
    let mut injected: Vec<OsString> = Vec::new();
    for s in settings {
        match sub.value_source(&s.id) {
            Some(ValueSource::CommandLine | ValueSource::EnvVariable) => {}
            _ => {
                injected.extend(s.args.into_iter().map(OsString::from));
                from_file.insert(s.id);
            }
        }
    }
    // Right after the subcommand's name: before any `--` and its positionals.
    let at = argv.iter().skip(1).position(|a| a == name).map_or(argv.len(), |i| i + 2);
    let mut merged = argv[..at].to_vec();
    merged.extend(injected);
    merged.extend_from_slice(&argv[at..]);
    let matches = cmd.try_get_matches_from(merged)?;
    Ok(Resolved { matches, from_file })
}
