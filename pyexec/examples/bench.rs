//! The pool's figures with processes 1 and 2:
//! `cargo run --release -p sluice-pyexec --example bench -- [PYTHON]`
//! (default: the workspace's `.venv-py`, `bash scripts/install-python-venv.sh`).

fn main() {
    let python = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(sluice_testkit::python::interpreter);
    let config = sluice_pyexec::bench::BenchConfig::new(python);
    match sluice_pyexec::bench::run(&config, &[1, 2]) {
        Ok(rows) => rows.iter().for_each(|r| println!("{r}")),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
