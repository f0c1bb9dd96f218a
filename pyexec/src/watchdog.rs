//! The hard deadline: one thread per pool SIGKILLs a process whose call has run
//! past its deadline.
//!
//! Why a killer rather than timed reads: a supervisor does plain blocking I/O on
//! its process's pipes (a write can block too, if the process stopped reading).
//! Killing the process ends both — the read sees EOF, the write a broken pipe —
//! and the supervisor then asks [`Watchdog::disarm`] whether the deadline was the
//! cause. A slot is disarmed before its process is reaped, and the killer only
//! signals armed slots under the same lock, so it never signals a reaped (and
//! possibly reused) pid.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

#[derive(Default)]
struct State {
    /// Per process index: the armed deadline and the pid to kill.
    armed: Vec<Option<(Instant, u32)>>,
    /// Per process index: killed since it was armed.
    fired: Vec<bool>,
    /// The pool is gone: kill what runs, start nothing new.
    closing: bool,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// A handle on the killer thread; the thread ends when the last handle drops.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

impl Watchdog {
    pub(crate) fn start(processes: usize) -> std::io::Result<Arc<Watchdog>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                armed: vec![None; processes],
                fired: vec![false; processes],
                closing: false,
                stop: false,
            }),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        std::thread::Builder::new().name("python-watchdog".into()).spawn(move || run(&s))?;
        Ok(Arc::new(Watchdog { shared }))
    }

    /// Kill `pid` (process `index`) if it is still armed at `deadline`.
    pub(crate) fn arm(&self, index: usize, pid: u32, deadline: Instant) {
        let mut st = self.lock();
        st.armed[index] = Some((deadline, pid));
        st.fired[index] = false;
        drop(st);
        self.shared.wake.notify_one();
    }

    /// Disarms process `index`; true when the deadline killed it.
    pub(crate) fn disarm(&self, index: usize) -> bool {
        let mut st = self.lock();
        st.armed[index] = None;
        std::mem::take(&mut st.fired[index])
    }

    /// The pool was dropped: every armed process is killed now (its call was
    /// abandoned with it), and [`Watchdog::closing`] tells supervisors not to
    /// start new ones.
    pub(crate) fn close(&self) {
        let mut st = self.lock();
        st.closing = true;
        let State { armed, fired, .. } = &mut *st;
        for (slot, fired) in armed.iter_mut().zip(fired.iter_mut()) {
            if let Some((_, pid)) = slot.take() {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                let _ = kill_group(pid);
                *fired = true;
            }
        }
    }

    pub(crate) fn closing(&self) -> bool {
        self.lock().closing
    }

    // A short section with no blocking call inside: a std Mutex.
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.wake.notify_one();
    }
}

fn run(shared: &Shared) {
    let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    while !st.stop {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let State { armed, fired, .. } = &mut *st;
        for (slot, fired) in armed.iter_mut().zip(fired.iter_mut()) {
            match *slot {
                Some((deadline, pid)) if deadline <= now => {
                    tracing::warn!(
                        pid,
                        "a Python call passed its hard deadline: killing the process"
                    );
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                    let _ = kill_group(pid);
                    *slot = None;
                    *fired = true;
                }
                Some((deadline, _)) => next = Some(next.map_or(deadline, |n| n.min(deadline))),
                None => {}
            }
        }
        st = match next {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                shared.wake.wait_timeout(st, wait).unwrap_or_else(|p| p.into_inner()).0
            }
            None => shared.wake.wait(st).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

/// SIGKILLs process group `pgid` (a runner and what its function forked).
pub(crate) fn kill_group(pgid: u32) -> nix::Result<()> {
    nix::sys::signal::killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL)
}
