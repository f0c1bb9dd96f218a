//! A second process for testkit's cross-process tests (`tests/`):
//!
//! - `hold-ports N [PORT…]` reserves N ports and prints `reserved P1 P2 …`, tries
//!   to claim each PORT given and prints `claimed PORT yes|no`, then `ready`, and
//!   holds its reservations until it is killed: the claims must die with it.
//! - `hold-ports --child` starts `sleep 60` from a thread that then exits, prints
//!   `child PID` and `ready`, and waits to be killed: the child must outlive the
//!   thread (it was forked by the spawner thread) but not this process.

use std::io::Write;

use sluice_testkit::Port;

fn main() -> Result<(), sluice_testkit::Error> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--child") {
        return hold_child();
    }
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let held = Port::reserve_n(n)?;
    let numbers: Vec<String> = held.iter().map(|p| p.number().to_string()).collect();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "reserved {}", numbers.join(" "));
    let mut claimed = vec![];
    for port in args.filter_map(|a| a.parse::<u16>().ok()) {
        let claim = Port::claim(port)?;
        let _ = writeln!(out, "claimed {port} {}", if claim.is_some() { "yes" } else { "no" });
        claimed.push(claim);
    }
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    drop(out);
    let _keep = (held, claimed);
    loop {
        // Woken only spuriously: the test ends this process with SIGKILL.
        std::thread::park();
    }
}

fn hold_child() -> Result<(), sluice_testkit::Error> {
    let spec = sluice_testkit::Spec::new("/bin/sleep", ["60"]);
    let child = std::thread::spawn(move || sluice_testkit::Child::spawn(&spec))
        .join()
        .expect("the starting thread")?;
    println!("child {}", child.id());
    println!("ready");
    let _keep = child;
    loop {
        // Woken only spuriously: the test ends this process with SIGKILL.
        std::thread::park();
    }
}
