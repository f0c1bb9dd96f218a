//! `sluice config check [--role ROLE] FILE [-- FLAGS...]`: validates a config file
//! for a role and prints the effective configuration — every flag of the role,
//! its value, and where the value came from (default, file, env, flag) — as TOML
//! that is itself a valid config file. The environment applies as it would to the
//! server; FLAGS after `--` stand for the server's command line.
//!
//! Secret values are never printed: a flag whose name says token, secret or
//! password and that does not take a file path shows `<redacted>`; the token in
//! `SLUICE_TOKEN` is reported as set, not shown.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{anyhow, bail};
use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Args, Command, Subcommand};
use toml::Value;

use super::file::{self, Kind};

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate a config file and print the effective configuration of a role.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The subcommand the file is for (dispatcher, worker, local, ...). Default:
    /// the one server role whose flags the file's keys all are.
    #[arg(long)]
    pub role: Option<String>,
    /// The TOML config file.
    pub file: PathBuf,
    /// The role's command-line flags, after `--` (they override the file).
    #[arg(last = true)]
    pub flags: Vec<OsString>,
}

/// Runs `sluice config check`; `cmd` is the whole `sluice` command (with `--config`).
pub fn run(a: ConfigArgs, cmd: Command) -> anyhow::Result<()> {
    let ConfigCommand::Check(a) = a.command;
    let role = match a.role {
        Some(r) => r,
        None => infer_role(&cmd, &a.file)?,
    };
    let Some(sub_cmd) = cmd.find_subcommand(&role).cloned() else {
        bail!("--role {role}: no such subcommand; give one of {}", super::SERVER_ROLES.join(", "))
    };
    if !sub_cmd.get_arguments().any(|a| a.get_id() == super::CONFIG_ARG) {
        bail!("--role {role}: `sluice {role}` takes no config file");
    }
    let mut argv: Vec<OsString> = vec!["sluice".into(), role.clone().into(), "--config".into()];
    argv.push(a.file.clone().into());
    argv.extend(a.flags);
    let resolved = super::resolve(cmd, argv).map_err(|e| match e {
        super::Error::Usage(e) => anyhow!("{}", e.render().to_string().trim_end()),
        super::Error::File(e) => anyhow!(e),
    })?;
    let (_, matches) = resolved.matches.subcommand().expect("the role was parsed");
    let mut out =
        format!("# `sluice {role}` with {}: valid. Effective configuration:\n", a.file.display());
    let settings: Vec<_> = file::keys(&sub_cmd).collect();
    // Aligned comments, except after the longest values (peer lists).
    let width = settings.iter().map(|arg| line(arg, matches).len()).filter(|l| *l <= 48).max();
    let width = width.unwrap_or(0);
    for arg in settings {
        let source = source(arg, matches, &resolved.from_file);
        out.push_str(&format!("{:<width$}  # {source}\n", line(arg, matches)));
    }
    let token_flag = sub_cmd.get_arguments().any(|a| a.get_long() == Some("token-file"));
    if token_flag && std::env::var_os("SLUICE_TOKEN").is_some_and(|v| !v.is_empty()) {
        out.push_str("# SLUICE_TOKEN is set (its value is not shown); --token-file wins over it\n");
    }
    std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes())?;
    Ok(())
}

/// The one server role every key of `path` is a flag of.
fn infer_role(cmd: &Command, path: &std::path::Path) -> anyhow::Result<String> {
    let table = file::read_table(path).map_err(|e| anyhow!(e))?;
    let errors: Vec<(&str, Vec<String>)> = super::SERVER_ROLES
        .iter()
        .filter_map(|r| Some((*r, file::settings(cmd.find_subcommand(r)?, &table).1)))
        .collect();
    let fits: Vec<&str> = errors.iter().filter(|(_, e)| e.is_empty()).map(|(r, _)| *r).collect();
    match fits.as_slice() {
        [one] => Ok(one.to_string()),
        [] => {
            let (role, errors) =
                errors.iter().min_by_key(|(_, e)| e.len()).expect("there are server roles");
            let sub = cmd.find_subcommand(role).expect("a server role");
            bail!(
                "{}\n(no role fits; `{role}` fits best: pass --role to check it for another)",
                file::describe(path, sub, errors)
            )
        }
        several => bail!(
            "{} could configure any of {}; pass --role to say which",
            path.display(),
            several.join(", ")
        ),
    }
}

/// `key = value` (or `# key =` when the flag has no value), as TOML.
fn line(arg: &Arg, matches: &ArgMatches) -> String {
    let key = arg.get_long().expect("config keys have a long name");
    let raw: Vec<String> = match matches.try_get_raw(arg.get_id().as_str()) {
        Ok(Some(values)) => values.map(|v| v.to_string_lossy().into_owned()).collect(),
        _ => Vec::new(),
    };
    if raw.is_empty() {
        return format!("# {key} =");
    }
    if is_secret(arg) {
        return format!("{key} = \"<redacted>\"");
    }
    let kind = Kind::of(arg);
    // Numbers and booleans were checked by the flag's parser: bare TOML.
    let render = |v: &str| match kind {
        Kind::String => Value::String(v.to_string()).to_string(),
        Kind::Bool | Kind::Integer | Kind::Number => v.to_string(),
    };
    if matches!(arg.get_action(), clap::ArgAction::Append) {
        let items: Vec<String> = raw.iter().map(|v| render(v)).collect();
        format!("{key} = [{}]", items.join(", "))
    } else {
        format!("{key} = {}", render(&raw.join(",")))
    }
}

/// A flag whose value is itself a secret (a token, not a token file's path).
fn is_secret(arg: &Arg) -> bool {
    let name = arg.get_long().unwrap_or_default();
    let secret = ["token", "secret", "password", "credential"].iter().any(|s| name.contains(s));
    let path = arg.get_value_names().is_some_and(|names| {
        names.iter().any(|n| n.as_str().contains("FILE") || n.as_str().contains("PATH"))
    }) || arg.get_value_parser().type_id() == std::any::TypeId::of::<PathBuf>();
    secret && !path
}

fn source(
    arg: &Arg,
    matches: &ArgMatches,
    from_file: &std::collections::BTreeSet<String>,
) -> String {
    if from_file.contains(arg.get_id().as_str()) {
        return "file".into();
    }
    match matches.value_source(arg.get_id().as_str()) {
        Some(ValueSource::DefaultValue) => "default".into(),
        Some(ValueSource::EnvVariable) => match arg.get_env() {
            Some(var) => format!("env {}", var.to_string_lossy()),
            None => "env".into(),
        },
        Some(ValueSource::CommandLine) => "flag".into(),
        _ => "unset".into(),
    }
}
