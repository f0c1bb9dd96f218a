//! Bearer tokens: [`Secret`], [`Role`] and the token file a server checks against
//! ([`TokenSet`]).
//!
//! # The token file
//! One token a line, `ROLE NAME SECRET`, separated by spaces; blank lines and
//! lines starting with `#` are skipped:
//! ```text
//! # role   name        secret (at least 16 visible ASCII characters, no spaces)
//! client   trainer-a   3f0c8c3e4b6d9a1f2e7c5b8a
//! worker   pool-1      9a8b7c6d5e4f3a2b1c0d9e8f
//! ```
//! `ROLE` is `client`, `worker` or `metrics` (a scraper of `/metrics` and the
//! status page, which may call no RPC). Names and secrets are unique within a file.
//! The name is the token's identity: logs and refusals name it, never the secret.
//! A side that presents a token (a client, a worker) reads just the secret: from
//! `--token-file` (the file's only content, surrounding whitespace ignored) or the
//! `SLUICE_TOKEN` variable.

use std::path::Path;
use std::sync::Arc;

use subtle::ConstantTimeEq;

use crate::error::SecurityError;

/// Shorter secrets are refused: a guessable token is no authentication.
pub const MIN_SECRET_CHARS: usize = 16;

/// What a token lets its holder do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Register datasets, read them (the Dispatcher's client RPCs, a worker's
    /// element streams).
    Client,
    /// Register as a worker, heartbeat, take splits.
    Worker,
    /// A dispatcher of the same group speaking Raft (`--peer-secret-file`).
    Peer,
    /// Read `/metrics` and the status page (a Prometheus scraper); no RPC.
    Metrics,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Worker => "worker",
            Role::Peer => "peer",
            Role::Metrics => "metrics",
        }
    }

    /// Where the holder of this role configures the token it presents.
    pub fn how_to_present(self) -> &'static str {
        match self {
            Role::Client => "give the client a client token: --token-file FILE or SLUICE_TOKEN",
            Role::Worker => "give the worker its worker token: --token-file FILE or SLUICE_TOKEN",
            Role::Peer => "give every dispatcher of the group the same --peer-secret-file",
            Role::Metrics => {
                "give the scraper a `metrics` token of --auth-tokens as \
                 `Authorization: Bearer TOKEN` (Prometheus: authorization.credentials_file)"
            }
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A secret: visible ASCII, no spaces, at least [`MIN_SECRET_CHARS`] long. Its
/// `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// Checks `text` is a usable secret; `Err` says why (never quoting it).
    pub fn parse(text: &str) -> Result<Secret, String> {
        if text.chars().count() < MIN_SECRET_CHARS {
            return Err(format!(
                "the secret is shorter than {MIN_SECRET_CHARS} characters; use a long random \
                 one (e.g. `openssl rand -hex 24`)"
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the secret must be visible ASCII characters without spaces".into());
        }
        Ok(Secret(text.into()))
    }

    /// The secret read from `path` (the whole file, trimmed), for `flag`.
    pub fn from_file(flag: &'static str, path: &Path) -> Result<Secret, SecurityError> {
        let text = std::fs::read_to_string(path).map_err(|error| SecurityError::Read {
            flag,
            path: path.to_path_buf(),
            error,
        })?;
        Secret::parse(text.trim()).map_err(|reason| SecurityError::BadFile {
            flag,
            path: path.to_path_buf(),
            reason,
        })
    }

    /// The secret held by an environment variable (or another named source).
    pub fn from_value(source_name: &str, text: &str) -> Result<Secret, SecurityError> {
        Secret::parse(text.trim())
            .map_err(|reason| SecurityError::BadSecret { source_name: source_name.into(), reason })
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// One accepted token.
#[derive(Clone, Debug)]
pub struct Token {
    pub role: Role,
    pub name: Arc<str>,
    secret: Secret,
}

/// The tokens a server accepts.
#[derive(Clone, Debug, Default)]
pub struct TokenSet {
    tokens: Vec<Token>,
}

impl TokenSet {
    /// Reads a token file (format in the module docs) named by `flag`.
    pub fn from_file(flag: &'static str, path: &Path) -> Result<TokenSet, SecurityError> {
        let text = std::fs::read_to_string(path).map_err(|error| SecurityError::Read {
            flag,
            path: path.to_path_buf(),
            error,
        })?;
        let set = TokenSet::parse(&text).map_err(|(line, reason)| SecurityError::TokenLine {
            flag,
            path: path.to_path_buf(),
            line,
            reason,
        })?;
        if set.tokens.is_empty() {
            return Err(SecurityError::BadFile {
                flag,
                path: path.to_path_buf(),
                reason: "no token in it (lines `ROLE NAME SECRET`, ROLE client, worker or metrics)"
                    .into(),
            });
        }
        Ok(set)
    }

    /// Parses token-file text; `Err((line, reason))` for the first bad line.
    pub fn parse(text: &str) -> Result<TokenSet, (usize, String)> {
        let mut set = TokenSet::default();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [role, name, secret] = fields[..] else {
                return Err((
                    n,
                    format!("expected `ROLE NAME SECRET` (3 fields), found {}", fields.len()),
                ));
            };
            let role = match role {
                "client" => Role::Client,
                "worker" => Role::Worker,
                "metrics" => Role::Metrics,
                other => {
                    return Err((
                        n,
                        format!("unknown role `{other}`: use `client`, `worker` or `metrics`"),
                    ))
                }
            };
            let secret = Secret::parse(secret).map_err(|reason| (n, reason))?;
            if set.tokens.iter().any(|t| &*t.name == name) {
                return Err((n, format!("the name `{name}` is used twice; names must be unique")));
            }
            if set.tokens.iter().any(|t| t.secret == secret) {
                return Err((
                    n,
                    "this secret is used by another line; give each token its own".into(),
                ));
            }
            set.tokens.push(Token { role, name: name.into(), secret });
        }
        Ok(set)
    }

    /// One token (a peer secret).
    pub fn single(role: Role, name: &str, secret: Secret) -> TokenSet {
        TokenSet { tokens: vec![Token { role, name: name.into(), secret }] }
    }

    /// The token whose secret is `presented`. Every token is compared, each in
    /// constant time, so the time taken does not tell which one (or how much of
    /// one) matched.
    pub fn find(&self, presented: &[u8]) -> Option<&Token> {
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.secret.expose().as_bytes().ct_eq(presented)) {
                found = Some(t);
            }
        }
        found
    }

    /// Whether any token has `role`.
    pub fn has_role(&self, role: Role) -> bool {
        self.tokens.iter().any(|t| t.role == role)
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn a_token_file_parses_roles_names_and_secrets() {
        let text = format!("# comment\n\nclient trainer {A}\nworker pool-1   {B}\n");
        let set = TokenSet::parse(&text).unwrap();
        assert_eq!(set.len(), 2);
        let t = set.find(A.as_bytes()).unwrap();
        assert_eq!((t.role, &*t.name), (Role::Client, "trainer"));
        let t = set.find(B.as_bytes()).unwrap();
        assert_eq!((t.role, &*t.name), (Role::Worker, "pool-1"));
        assert!(set.find(b"cccccccccccccccccccc").is_none());
        assert!(set.find(&A.as_bytes()[..10]).is_none());
    }

    #[test]
    fn bad_lines_are_refused_naming_the_line_and_never_the_secret() {
        let cases = [
            (format!("client x {A}\nadmin y {B}"), 2, "unknown role `admin`"),
            (format!("client {A}"), 1, "3 fields"),
            ("client x tiny".to_string(), 1, "shorter than 16"),
            (format!("client x {A}\nworker x {B}"), 2, "used twice"),
            (format!("client x {A}\nworker y {A}"), 2, "another line"),
        ];
        for (text, line, want) in cases {
            let (n, reason) = TokenSet::parse(&text).unwrap_err();
            assert_eq!(n, line, "{text}");
            assert!(reason.contains(want), "{reason}");
            assert!(!reason.contains(A) && !reason.contains("tiny"), "{reason}");
        }
    }

    #[test]
    fn an_empty_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens");
        std::fs::write(&p, "# nothing\n").unwrap();
        let err = TokenSet::from_file("--auth-tokens", &p).unwrap_err().to_string();
        assert!(err.contains("--auth-tokens") && err.contains("no token"), "{err}");
    }

    #[test]
    fn a_secret_file_is_trimmed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, format!("  {A}\n")).unwrap();
        assert_eq!(Secret::from_file("--token-file", &p).unwrap().expose(), A);
        std::fs::write(&p, "two words here and more").unwrap();
        let err = Secret::from_file("--token-file", &p).unwrap_err().to_string();
        assert!(err.contains("--token-file") && err.contains("without spaces"), "{err}");
        assert_eq!(format!("{:?}", Secret::parse(A).unwrap()), "Secret(…)");
    }
}
