//! The one thread that forks every child, with the parent-death signal set.
//!
//! `PR_SET_PDEATHSIG = SIGKILL` (Linux) makes the kernel kill a child when its
//! parent dies without unwinding (SIGKILL, abort, Ctrl-C), when no `Drop` runs.
//! The subtlety: the "parent" the kernel watches is the *thread* that forked the
//! child, not the process. A child forked from a tokio blocking thread, or from a
//! test's own thread, would be killed as soon as that thread retires — in the
//! middle of a test. So every child is forked here, by one spawner thread that
//! lives as long as the process (its inbox sits in a static and is never closed).

use std::process::Command;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<std::process::Child>>);

/// Forks `cmd` on the spawner thread, with the parent-death signal set; returns
/// the started child (or the spawn error).
pub fn spawn(cmd: Command) -> std::io::Result<std::process::Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                // Lives until the process exits: the sender sits in a static.
                for (mut cmd, reply) in rx {
                    set_parent_death_signal(&mut cmd);
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the spawner thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    // A short section with no await: sending a request.
    spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, tx))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    // Bounded: the spawner answers as soon as fork/exec returns.
    rx.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

#[cfg(target_os = "linux")]
fn set_parent_death_signal(cmd: &mut Command) {
    use nix::sys::signal::Signal;
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as i32;
    // SAFETY: the closure runs in the forked child before exec and makes only two
    // async-signal-safe system calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The parent may have died between fork and prctl: then nobody would
            // send the signal; refuse to start instead.
            if nix::unistd::getppid().as_raw() != parent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal(_cmd: &mut Command) {}
