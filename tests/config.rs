//! `--config FILE` and `sluice config check` (issue 16, item 1), with real
//! `sluice` processes: the precedence file < environment < command line, the
//! errors of a bad file (unknown key with its closest valid key, a wrong type, a
//! missing file), and the committed examples of deploy/config/, checked and then
//! run as a 3-dispatcher quorum with TLS, tokens and a worker, read from end to end.

mod common;

// Shared with tests/security.rs, which uses all of it.
#[allow(dead_code)]
#[path = "security/pki.rs"]
mod pki;

use std::path::{Path, PathBuf};

use common::Port;
use sluice_testkit::{run, Child as Proc, DEADLINE};

/// `sluice ARGS` with `envs`, to completion: (success, stdout, stderr).
fn sluice_env(args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let envs: Vec<(String, String)> =
        envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let out = run(&common::sluice().spec(args, &envs), None, DEADLINE).unwrap();
    (out.success(), out.stdout, out.stderr)
}

/// The `key = value  # source` line of `key` in `config check`'s output.
fn effective<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{key} =")) || l.starts_with(&format!("# {key} =")))
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{out}"))
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn config_check_shows_the_file_below_the_environment_below_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "d.toml",
        "data-roots = \"/from-file\"\nmax-jobs = 7\ngc-dynamic-jobs = true\n",
    );
    let check = ["config", "check", "--role", "dispatcher", &file];
    let (ok, out, err) = sluice_env(&check, &[]);
    assert!(ok, "{err}");
    let line = effective(&out, "data-roots");
    assert!(line.starts_with("data-roots = \"/from-file\"") && line.ends_with("# file"), "{out}");
    assert!(effective(&out, "max-jobs").starts_with("max-jobs = 7 "), "{out}");
    assert!(effective(&out, "max-jobs").ends_with("# file"), "{out}");
    assert!(effective(&out, "gc-dynamic-jobs").starts_with("gc-dynamic-jobs = true"), "{out}");
    assert!(effective(&out, "max-datasets").ends_with("# default"), "{out}");
    assert!(effective(&out, "work-dir").ends_with("# unset"), "{out}");

    // The environment beats the file.
    let env = [("SLUICE_DATA_ROOTS", "/from-env")];
    let (ok, out, err) = sluice_env(&check, &env);
    assert!(ok, "{err}");
    let line = effective(&out, "data-roots");
    assert!(line.starts_with("data-roots = \"/from-env\""), "{out}");
    assert!(line.ends_with("# env SLUICE_DATA_ROOTS"), "{out}");

    // The command line beats both.
    let flags = [&check[..], &["--", "--data-roots", "/from-flag", "--max-jobs", "9"]].concat();
    let (ok, out, err) = sluice_env(&flags, &env);
    assert!(ok, "{err}");
    let line = effective(&out, "data-roots");
    assert!(line.starts_with("data-roots = \"/from-flag\"") && line.ends_with("# flag"), "{out}");
    assert!(effective(&out, "max-jobs").starts_with("max-jobs = 9 "), "{out}");
}

#[test]
fn the_file_may_supply_a_flag_that_one_on_the_command_line_requires() {
    // `sluice read --num-consumers` requires --consumer-index: here from the file.
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "r.toml",
        "consumer-index = 1
job-name = \"j\"\n",
    );
    let check = ["config", "check", "--role", "read", &file, "--", "--num-consumers", "2"];
    let (ok, out, err) = sluice_env(&check, &[]);
    assert!(ok, "{err}");
    assert!(effective(&out, "consumer-index").starts_with("consumer-index = 1 "), "{out}");
    assert!(effective(&out, "num-consumers").ends_with("# flag"), "{out}");
    // Without the file the command line alone is refused, as before.
    let (ok, _, err) = sluice_env(&["read", "--num-consumers", "2", "--dataset-id", "1"], &[]);
    assert!(!ok && err.contains("--consumer-index"), "{err}");
}

#[test]
fn a_dispatcher_listens_where_its_config_file_says_unless_a_flag_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let port = Port::reserve().unwrap();
    let number = port.number();
    let file = write(dir.path(), "d.toml", &format!("host = \"127.0.0.1\"\nport = {number}\n"));
    drop(port);
    let d = common::server(&["dispatcher", "--config", &file]);
    assert_eq!(d.address(), format!("127.0.0.1:{number}"));
    drop(d);

    // SLUICE_CONFIG names the file as --config does; --port beats the file's port.
    let envs = [("SLUICE_CONFIG".to_string(), file.clone())];
    let d = common::server_env(&["dispatcher", "--port", "0"], &envs);
    assert_ne!(d.address(), format!("127.0.0.1:{number}"), "the flag is ignored");
    drop(d);
    let d = common::server_env(&["dispatcher"], &envs);
    assert_eq!(d.address(), format!("127.0.0.1:{number}"), "SLUICE_CONFIG is ignored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dials_the_dispatcher_of_its_environment_over_that_of_its_file() {
    let dir = tempfile::tempdir().unwrap();
    // The file names a dispatcher that does not exist; SLUICE_DISPATCHER the real one.
    let nowhere = Port::reserve().unwrap();
    let file = write(dir.path(), "w.toml", &format!("dispatcher = [\"{}\"]\n", nowhere.address()));
    let d = common::server(&["dispatcher", "--port", "0"]);
    let envs = [("SLUICE_DISPATCHER".to_string(), d.address().to_string())];
    let _w = common::server_env(&["worker", "--config", &file, "--port", "0"], &envs);
    let client =
        sluice_client::Client::new(&[d.address().to_string()], Default::default()).unwrap();
    common::wait_until("the worker registered with the environment's dispatcher", || async {
        client.status().await.is_ok_and(|s| s.workers.len() == 1)
    })
    .await;
}

#[test]
fn an_unknown_key_is_refused_naming_the_key_the_file_and_the_closest_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "d.toml", "work_dir = \"/tmp/x\"\nport = 0\n");
    for args in [
        &["dispatcher", "--config", &file][..],
        &["config", "check", "--role", "dispatcher", &file][..],
    ] {
        let (ok, out, err) = sluice_env(args, &[]);
        assert!(!ok, "{args:?} accepted a misspelt key: {out}");
        assert!(err.contains(&file), "{err}");
        assert!(err.contains("unknown key `work_dir`"), "{err}");
        assert!(err.contains("did you mean `work-dir`?"), "{err}");
    }
}

#[test]
fn a_value_of_the_wrong_type_is_refused_naming_the_key_and_the_type() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "d.toml", "port = \"5050\"\ngc-dynamic-jobs = \"yes\"\n");
    let (ok, _, err) = sluice_env(&["dispatcher", "--config", &file], &[]);
    assert!(!ok);
    assert!(err.contains("`port` must be an integer, not a string"), "{err}");
    assert!(err.contains("`gc-dynamic-jobs` must be a boolean (true or false)"), "{err}");
    // A value of the right type that the flag refuses names the key too.
    let file = write(dir.path(), "range.toml", "port = 70000\n");
    let (ok, _, err) = sluice_env(&["dispatcher", "--config", &file], &[]);
    assert!(!ok);
    assert!(err.contains("`port = 70000` is not a valid --port"), "{err}");
}

#[test]
fn a_missing_config_file_is_an_error_naming_it() {
    let missing = "/nonexistent/sluice.toml";
    for args in [
        &["dispatcher", "--config", missing][..],
        &["config", "check", "--role", "worker", missing][..],
    ] {
        let (ok, _, err) = sluice_env(args, &[]);
        assert!(!ok, "{args:?}");
        assert!(err.contains("cannot read the config file /nonexistent/sluice.toml"), "{err}");
    }
}

#[test]
fn a_config_file_over_the_bound_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.toml");
    // Valid TOML past 1 MiB: refused for its size, not its content.
    let mut text = String::from("port = 0\n");
    text.push_str(&"# padding\n".repeat(120_000));
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    for args in [&["dispatcher", "--config", path][..], &["config", "check", path][..]] {
        let (ok, _, err) = sluice_env(args, &[]);
        assert!(!ok, "{args:?}");
        assert!(err.contains("is larger than 1048576 bytes"), "{err}");
    }
}

/// deploy/config/NAME.
fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config").join(name)
}

#[test]
fn every_committed_example_passes_config_check() {
    let examples: Vec<PathBuf> = std::fs::read_dir(example(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    assert!(examples.len() >= 2, "{examples:?}");
    for path in examples {
        let role = path.file_stem().unwrap().to_str().unwrap().to_string();
        let file = path.display().to_string();
        let (ok, out, err) = sluice_env(&["config", "check", "--role", &role, &file], &[]);
        assert!(ok, "{file}: {err}");
        assert!(out.contains(&format!("`sluice {role}` with {file}: valid")), "{out}");
        // Without --role the example's keys name its role.
        let (ok, out, err) = sluice_env(&["config", "check", &file], &[]);
        assert!(ok && out.contains(&format!("`sluice {role}`")), "{file}: {out}{err}");
    }
}

/// An example with its machine's names made this test's: /etc/sluice/ is the
/// test's certificates and tokens, /srv/data a temporary directory, each
/// `sluice-dispatcher-N.sluice-dispatcher:PORT` a loopback address.
fn localise(name: &str, pki: &pki::Pki, dispatchers: &[(String, String)], out: &Path) -> String {
    let mut text = std::fs::read_to_string(example(name)).unwrap();
    text = text.replace("/etc/sluice/", &format!("{}/", pki.dir().display()));
    text = text.replace("/srv/data", &out.display().to_string());
    for (i, (client, raft)) in dispatchers.iter().enumerate() {
        let host = format!("sluice-dispatcher-{i}.sluice-dispatcher");
        text = text.replace(&format!("{host}:5050/6050"), &format!("{client}/{raft}"));
        text = text.replace(&format!("{host}:5050"), client);
    }
    assert!(!text.contains("sluice-dispatcher-"), "a name left in {name}:\n{text}");
    write(out, name, &text)
}

#[test]
fn the_committed_examples_run_a_quorum_and_a_worker_with_tls_and_tokens() {
    let pki = pki::Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<Port> = (0..6).map(|_| Port::reserve().unwrap()).collect();
    let dispatchers: Vec<(String, String)> =
        (0..3).map(|i| (ports[i].address(), ports[i + 3].number().to_string())).collect();
    let d_file = localise("dispatcher.toml", &pki, &dispatchers, dir.path());
    let w_file = localise("worker.toml", &pki, &dispatchers, dir.path());
    drop(ports);
    // What differs per node (or binds beyond loopback) is given on the command
    // line, over the file, as an operator gives it.
    let nodes: Vec<Proc> = (1..=3)
        .map(|id| {
            let work_dir = dir.path().join(format!("node-{id}")).display().to_string();
            let node = id.to_string();
            let args = ["dispatcher", "--config", &d_file, "--node-id", &node];
            let overrides = ["--work-dir", &work_dir, "--metrics-addr", "127.0.0.1:0"];
            common::server(&[&args[..], &overrides[..]].concat())
        })
        .collect();
    let w_port = Port::reserve().unwrap();
    let (w_address, w_number) = (w_port.address(), w_port.number().to_string());
    drop(w_port);
    let worker_args = ["worker", "--config", &w_file, "--host", "127.0.0.1", "--port", &w_number];
    let _worker = common::server(
        &[&worker_args[..], &["--advertise", &w_address, "--metrics-addr", "127.0.0.1:0"]].concat(),
    );
    let addresses: Vec<&str> = nodes.iter().map(|n| n.address()).collect();
    let spec = r#"{"stages": [{"range": {"stop": 10}}]}"#;
    let read = [
        "read",
        "--dispatcher",
        &addresses.join(","),
        "--tls-ca",
        &pki.arg("ca.pem"),
        "--token-file",
        &pki.arg("client.token"),
        "--spec",
        "-",
        "--mode",
        "off",
    ];
    let (ok, out, err) = common::run_sluice(&read, Some(spec));
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 10, "{out}");
}
