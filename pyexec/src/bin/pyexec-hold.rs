//! A process that holds a pool (`pyexec-hold PYTHON PYTHONPATH`) whose two
//! processes are both busy in `sluice_test_fns:mark_and_sleep`, and waits to be
//! killed: the lifecycle test SIGKILLs it and checks that its Python processes,
//! deaf to their closed stdin while they sleep, die with it. Not a tool.

use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

use sluice_dataset::{Element, PyCall, PyFunction, PyOp, PythonExecutor, Tensor};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(python), Some(path)) = (args.next(), args.next()) else {
        panic!("usage: pyexec-hold PYTHON PYTHONPATH")
    };
    let mut config = sluice_pyexec::PoolConfig::new(python);
    config.processes = 2;
    config.call_timeout = Duration::from_secs(3600);
    config.env = vec![("PYTHONPATH".into(), path)];
    let pool = sluice_pyexec::Pool::start(config).expect("start the pool");
    let (reply, _answers) = channel();
    let function = Arc::new(PyFunction::Ref("sluice_test_fns:mark_and_sleep".into()));
    for ticket in 0..2 {
        let call = PyCall {
            function: function.clone(),
            made_with: pool.version().to_string(),
            op: PyOp::Map,
            inputs: vec![Element::single(Tensor::scalar_i64(ticket as i64))],
            retries: 0,
        };
        pool.submit(call, ticket, reply.clone());
    }
    loop {
        std::thread::park();
    }
}
