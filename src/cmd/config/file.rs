//! A `--config` file to command-line arguments for one subcommand. Every key must
//! be one of the subcommand's long flag names and its value of the flag's type:
//! a TOML boolean for a switch, an integer for an integer flag, a number for a
//! fractional one, a string otherwise; a list flag (one that takes several values
//! or is documented as comma-separated) also takes an array. Each value is then
//! run through the flag's own parser, so a bad value names the key and the file
//! instead of surfacing later as an anonymous bad flag. Every error of the file is
//! reported at once.

use std::any::TypeId;
use std::path::Path;

use clap::{Arg, ArgAction, Command};
use toml::Value;

/// The id (and long name) of the `--config` argument, which is not a key.
pub const CONFIG_ARG: &str = "config";

/// One key of the file: the clap argument it sets and the arguments that set it.
pub struct Setting {
    pub id: String,
    pub args: Vec<String>,
}

/// The kind of TOML value a flag takes.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Kind {
    Bool,
    Integer,
    Number,
    String,
}

impl Kind {
    pub fn of(arg: &Arg) -> Kind {
        if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
            return Kind::Bool;
        }
        if matches!(arg.get_action(), ArgAction::Count) {
            return Kind::Integer;
        }
        let t = arg.get_value_parser().type_id();
        let integers = [
            TypeId::of::<u8>(),
            TypeId::of::<u16>(),
            TypeId::of::<u32>(),
            TypeId::of::<u64>(),
            TypeId::of::<usize>(),
            TypeId::of::<i8>(),
            TypeId::of::<i16>(),
            TypeId::of::<i32>(),
            TypeId::of::<i64>(),
            TypeId::of::<isize>(),
        ];
        if integers.iter().any(|i| t == *i) {
            Kind::Integer
        } else if t == TypeId::of::<f64>() || t == TypeId::of::<f32>() {
            Kind::Number
        } else {
            Kind::String
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Bool => "a boolean (true or false)",
            Kind::Integer => "an integer",
            Kind::Number => "a number",
            Kind::String => "a string",
        }
    }

    /// `value` as the flag's text, or `None` if it is of another type.
    fn text(self, value: &Value) -> Option<String> {
        match (self, value) {
            (Kind::Integer | Kind::Number, Value::Integer(i)) => Some(i.to_string()),
            (Kind::Number, Value::Float(f)) => Some(f.to_string()),
            (Kind::String, Value::String(s)) => Some(s.clone()),
            _ => None,
        }
    }
}

/// Whether the flag takes several values: repeated, split at a delimiter, or a
/// comma-separated string (its help says so).
pub fn is_list(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Append)
        || arg.get_value_delimiter().is_some()
        || arg.get_help().is_some_and(|h| h.to_string().contains("comma-separated"))
}

/// The flags of `cmd` a file may set: those with a long name, but not `--config`,
/// `--help` or `--version`.
pub fn keys(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| {
        a.get_long().is_some()
            && a.get_id() != CONFIG_ARG
            && !matches!(a.get_action(), ArgAction::Help | ArgAction::Version)
    })
}

/// The largest config file read: a file of every flag is a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The TOML table of the config file at `path`, read bounded ([`MAX_CONFIG_BYTES`]).
pub fn read_table(path: &Path) -> Result<toml::Table, String> {
    use std::io::Read;
    let file = path.display();
    let cannot = |e: std::io::Error| {
        format!("cannot read the config file {file}: {e} (check --config / SLUICE_CONFIG)")
    };
    // Bounded before it allocates: at most one byte past the limit is read.
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "the config file {file} is larger than {MAX_CONFIG_BYTES} bytes; a config file \
             holds flags (keys are the long flag names), not data"
        ));
    }
    text.parse().map_err(|e| format!("the config file {file} is not valid TOML: {e}"))
}

/// Reads `path` and turns it into `cmd`'s arguments, or says everything wrong with it.
pub fn load(path: &Path, cmd: &Command) -> Result<Vec<Setting>, String> {
    let table = read_table(path)?;
    let (settings, errors) = settings(cmd, &table);
    if errors.is_empty() {
        return Ok(settings);
    }
    Err(describe(path, cmd, &errors))
}

/// The message for `errors` of the file at `path` for `cmd`: one line each.
pub fn describe(path: &Path, cmd: &Command, errors: &[String]) -> String {
    let (file, role) = (path.display(), cmd.get_name());
    let mut msg = format!("the config file {file} is not valid for `sluice {role}`:");
    for e in errors {
        msg.push_str("\n  - ");
        msg.push_str(e);
    }
    msg
}

/// The settings of `table` for `cmd`, and a message for each bad key.
pub fn settings(cmd: &Command, table: &toml::Table) -> (Vec<Setting>, Vec<String>) {
    let mut settings = Vec::new();
    let mut errors = Vec::new();
    for (key, value) in table {
        match keys(cmd).find(|a| a.get_long() == Some(key.as_str())) {
            Some(arg) => match args(arg, key, value) {
                Ok(args) => settings.push(Setting { id: arg.get_id().to_string(), args }),
                Err(e) => errors.push(e),
            },
            None => errors.push(unknown(cmd, key, value)),
        }
    }
    (settings, errors)
}

fn unknown(cmd: &Command, key: &str, value: &Value) -> String {
    let role = cmd.get_name();
    let mut msg = format!("unknown key `{key}`");
    if value.is_table() {
        msg.push_str(" (a table: the keys are flat, at the top level)");
    }
    // clap's own "did you mean" threshold.
    let closest = keys(cmd)
        .filter_map(|a| a.get_long())
        .map(|long| (strsim::jaro(key, long), long))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match closest {
        Some((_, long)) => msg.push_str(&format!(", did you mean `{long}`?")),
        None => msg.push_str(&format!(
            "; the keys are the long flags of `sluice {role} --help`, without the dashes"
        )),
    }
    msg
}

/// `--key=value` arguments for one key, its value checked by the flag's parser.
fn args(arg: &Arg, key: &str, value: &Value) -> Result<Vec<String>, String> {
    let kind = Kind::of(arg);
    let wrong =
        |what: &str| format!("`{key}` must be {what}, not {} `{value}`", article(value.type_str()));
    if kind == Kind::Bool {
        let Value::Boolean(b) = value else { return Err(wrong(kind.expected())) };
        let on = matches!(arg.get_action(), ArgAction::SetTrue);
        return Ok(if *b == on { vec![format!("--{key}")] } else { Vec::new() });
    }
    let texts = match value {
        Value::Array(items) if is_list(arg) => {
            let texts: Option<Vec<String>> = items.iter().map(|v| kind.text(v)).collect();
            let expected = format!("{} or an array of them", kind.expected());
            texts.ok_or_else(|| wrong(&expected))?
        }
        _ => match kind.text(value) {
            Some(t) => vec![t],
            None if is_list(arg) => {
                return Err(wrong(&format!("{} or an array of them", kind.expected())))
            }
            None => return Err(wrong(kind.expected())),
        },
    };
    // A repeatable flag takes each value as its own argument; any other list flag
    // takes the comma-separated string its help documents.
    let texts = if matches!(arg.get_action(), ArgAction::Append) || texts.len() == 1 {
        texts
    } else {
        vec![texts.join(",")]
    };
    texts.iter().try_for_each(|t| check_value(arg, key, value, t))?;
    Ok(texts.into_iter().map(|t| format!("--{key}={t}")).collect())
}

/// Runs `text` through `arg`'s own value parser, alone (so other flags' rules,
/// such as `requires`, do not apply here; the full parse checks them).
fn check_value(arg: &Arg, key: &str, value: &Value, text: &str) -> Result<(), String> {
    let mut probe = Arg::new("value")
        .long("value")
        .action(arg.get_action().clone())
        .value_parser(arg.get_value_parser().clone());
    if let Some(d) = arg.get_value_delimiter() {
        probe = probe.value_delimiter(d);
    }
    let probe_cmd = Command::new("probe").no_binary_name(true).arg(probe);
    match probe_cmd.try_get_matches_from([format!("--value={text}")]) {
        Ok(_) => Ok(()),
        Err(e) => {
            let why = std::error::Error::source(&e)
                .map_or_else(|| e.kind().to_string(), |s| s.to_string());
            let mut msg = format!("`{key} = {value}` is not a valid --{key}: {why}");
            if let Some(clap::error::ContextValue::Strings(valid)) =
                e.get(clap::error::ContextKind::ValidValue)
            {
                msg.push_str(&format!(" (one of: {})", valid.join(", ")));
            }
            Err(msg)
        }
    }
}

fn article(type_str: &str) -> String {
    let a = if type_str.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{a} {type_str}")
}
