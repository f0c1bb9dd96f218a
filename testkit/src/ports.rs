//! Loopback ports reserved for a server, without the bind-and-release race.
//!
//! The old way — bind port 0, read the port, close the socket, hand the number
//! to a child — leaves a window in which anything else can be given the same
//! port. A [`Port`] closes it in two ways:
//!
//! - **Below the ephemeral range.** The kernel hands out ports for `bind(0)` and
//!   for the source side of outgoing connections only from
//!   `/proc/sys/net/ipv4/ip_local_port_range` (from 32768 by default). A port
//!   picked below it can be taken only by someone who asks for that number, so
//!   no proxy, no moto, no client connection takes it — also not while its server
//!   is down between a kill and a restart.
//! - **A claim file per port.** Among those who do pick numbers (this harness, in
//!   every test binary and in `sluice chaos`/`sluice bench` running beside them),
//!   a port belongs to whoever holds an exclusive `flock` on
//!   `<temp dir>/sluice-port-claims/<port>`. Why files: a lock on a file is shared
//!   by every process on the machine, needs no daemon, and is released by the
//!   kernel when its holder exits however it exits — a crashed test leaves no
//!   stale claim. The lock is per open file, so two reservations in one process
//!   exclude each other too. Claim files are never deleted: unlinking a locked
//!   file would let a newcomer lock a fresh file of the same name beside it.
//!
//! After claiming, a probe bind checks that nobody outside the scheme listens
//! there; the probe socket is closed at once (the claim, not a socket, holds the
//! port), so the caller can bind it or hand the number to a child.

use std::fs::File;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};
use rand::Rng;

use crate::Error;

/// Ports are picked from `LOW` up to the start of the ephemeral range.
const LOW: u16 = 10_000;
/// Random picks before giving up.
const TRIES: usize = 1_000;

/// A claimed loopback port, held until dropped.
#[derive(Debug)]
pub struct Port {
    port: u16,
    _claim: Flock<File>,
}

impl Port {
    /// Claims a free port below the ephemeral range (random, so concurrent callers
    /// rarely contend for one number).
    pub fn reserve() -> Result<Port, Error> {
        let high = ephemeral_low().max(LOW + 500);
        let mut rng = rand::thread_rng();
        for _ in 0..TRIES {
            if let Some(port) = Port::claim(rng.gen_range(LOW..high))? {
                return Ok(port);
            }
        }
        Err(Error::NoFreePort { low: LOW, high, tries: TRIES })
    }

    /// `n` claimed ports.
    pub fn reserve_n(n: usize) -> Result<Vec<Port>, Error> {
        (0..n).map(|_| Port::reserve()).collect()
    }

    /// Claims this very port: `None` if another reservation (in any process)
    /// holds it or something listens on it.
    pub fn claim(port: u16) -> Result<Option<Port>, Error> {
        let path = claims_dir()?.join(port.to_string());
        let file = open_claim(&path)?;
        let claim = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(claim) => claim,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
            Err((_, e)) => {
                return Err(Error::io(format!("locking {}", path.display()), e.into()));
            }
        };
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(_probe) => Ok(Some(Port { port, _claim: claim })),
            Err(_) => Ok(None),
        }
    }

    pub fn number(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Binds it (for a server in this process).
    pub fn bind(&self) -> std::io::Result<TcpListener> {
        TcpListener::bind(("127.0.0.1", self.port))
    }
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768)
}

fn claims_dir() -> Result<PathBuf, Error> {
    let dir = std::env::temp_dir().join("sluice-port-claims");
    if !dir.is_dir() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        match std::fs::DirBuilder::new().mode(0o1777).create(&dir) {
            // Shared by every user's runs, like the temp dir itself (the umask
            // narrowed the mode given above).
            Ok(()) => {
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(format!("creating {}", dir.display()), e)),
        }
    }
    Ok(dir)
}

fn open_claim(path: &PathBuf) -> Result<File, Error> {
    let created =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path);
    match created {
        Ok(file) => Ok(file),
        // Another user's file: a read-only descriptor can hold the lock as well.
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))
        }
        Err(e) => Err(Error::io(format!("opening {}", path.display()), e)),
    }
}
