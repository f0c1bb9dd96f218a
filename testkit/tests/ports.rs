//! Two reservations never share a port: not within a process, not across
//! processes; and a claim dies with the process that held it.

use std::collections::BTreeSet;
use std::io::BufRead;

use sluice_testkit::{Child, Port, Spec};

#[test]
fn concurrent_reservations_in_one_process_never_share_a_port() {
    let threads: Vec<_> =
        (0..8).map(|_| std::thread::spawn(|| Port::reserve_n(25).expect("25 ports"))).collect();
    let held: Vec<Port> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let numbers: BTreeSet<u16> = held.iter().map(Port::number).collect();
    assert_eq!(numbers.len(), held.len(), "a port was handed out twice");
    for port in &held {
        assert!(port.number() >= 10_000, "{}", port.number());
        assert!(Port::claim(port.number()).unwrap().is_none(), "{} claimed twice", port.number());
    }
    // The holder can bind it (the claim, not a socket, holds it).
    let listener = held[0].bind().expect("the holder binds its port");
    assert_eq!(listener.local_addr().unwrap().port(), held[0].number());
}

#[test]
fn reservations_exclude_another_process_and_die_with_it() {
    let mine = Port::reserve_n(20).unwrap();
    let mut args = vec!["20".to_string()];
    args.extend(mine.iter().map(|p| p.number().to_string()));
    let mut other = Child::spawn(&Spec::new(env!("CARGO_BIN_EXE_hold-ports"), args)).unwrap();
    let lines: Vec<String> = other
        .take_stdout()
        .unwrap()
        .lines()
        .map(|l| l.expect("a line"))
        .take_while(|l| l != "ready")
        .collect();
    let theirs: Vec<u16> = lines[0]
        .strip_prefix("reserved ")
        .expect(&lines[0])
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(theirs.len(), 20, "{lines:?}");
    let claimed: Vec<&String> = lines[1..].iter().filter(|l| !l.ends_with(" no")).collect();
    assert!(claimed.is_empty(), "the other process claimed ports held here: {claimed:?}");
    assert_eq!(lines.len(), 21, "{lines:?}");
    for port in &theirs {
        assert!(!mine.iter().any(|p| p.number() == *port), "{port} reserved by both");
        assert!(Port::claim(*port).unwrap().is_none(), "{port} claimed here while held there");
    }

    // SIGKILL: no destructor runs there, the kernel drops its locks.
    drop(other);
    let back: Vec<Option<Port>> = theirs.iter().map(|p| Port::claim(*p).unwrap()).collect();
    assert!(back.iter().all(Option::is_some), "claims outlived their process: {back:?}");
}
