//! The producer threads of one `interleave` stage: a pool of at most
//! `parallelism` threads that outlive the streams they read.
//!
//! Why a pool: a thread per opened stream (one per file) started a thread per
//! file, and each new thread got fresh allocator heaps whose pages the kernel
//! had to fault in and zero (~8 % of a worker's CPU on 11 KB TFRecord records,
//! docs/performance.md). A pool thread reads one stream after another with the
//! same heaps, so a stage's memory is faulted in once.
//!
//! A job is one stream: the thread calls the dataset function on the input
//! element and sends the stream's items, gathered as the module doc of
//! `interleave` says, into the slot's channel. It drops the stream and then the
//! channel's sender, so a consumer that sees the channel end knows the stream was
//! released. A panic in the job (outside the dataset function, which `call`
//! already catches) is sent as the stream's last item instead of passing for its
//! end. Dropping the pool ends its job channels and joins the threads.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::def::Arg;
use crate::error::DatasetError;
use crate::registry::DatasetFn;
use crate::tensor::Element;

use super::ops::call;

type Item = Result<Element, DatasetError>;

/// Most elements, and payload bytes, a producer gathers into one message while
/// its channel is full (a larger element is a message of its own).
pub(super) const CHUNK: usize = 32;
pub(super) const CHUNK_BYTES: usize = 256 << 10;

/// One stream to read: the input element, the dataset function and the slot's
/// channel.
pub(super) struct Job {
    pub element: Element,
    pub tx: SyncSender<Vec<Item>>,
    pub name: String,
    pub args: Arc<[Arg]>,
    pub f: DatasetFn,
}

struct Thread {
    jobs: SyncSender<Box<Job>>,
    handle: JoinHandle<()>,
}

/// The stage's producer threads, started as needed up to `size`.
pub(super) struct Pool {
    size: usize,
    threads: Vec<Thread>,
    /// Threads (indexes into `threads`) with no stream to read.
    idle: Vec<usize>,
}

impl Pool {
    pub(super) fn new(size: usize) -> Self {
        Pool { size, threads: Vec::new(), idle: Vec::new() }
    }

    /// Threads reading a stream now.
    pub(super) fn busy(&self) -> usize {
        self.threads.len() - self.idle.len()
    }

    /// Hands `job` to an idle thread, starting one if fewer than `size` run;
    /// returns the thread's index, or the job when no thread can take it (all
    /// busy, or none can be started).
    pub(super) fn run(&mut self, job: Box<Job>) -> Result<usize, Box<Job>> {
        let job = match self.idle.pop() {
            Some(i) => match self.threads[i].jobs.send(job) {
                Ok(()) => return Ok(i),
                // The thread is gone (it cannot be: jobs never panic out of
                // `Thread::serve`); start another in its place below.
                Err(back) => back.0,
            },
            None => job,
        };
        if self.threads.len() >= self.size {
            return Err(job);
        }
        let (jobs, rx) = sync_channel::<Box<Job>>(1);
        let spawned =
            std::thread::Builder::new().name("sluice-interleave".into()).spawn(move || serve(rx));
        match spawned {
            Ok(handle) => {
                // Cannot fail: the channel is new, has room and its thread lives.
                let sent = jobs.send(job);
                self.threads.push(Thread { jobs, handle });
                match sent {
                    Ok(()) => Ok(self.threads.len() - 1),
                    Err(back) => Err(back.0),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start an interleave thread; reading inline");
                Err(job)
            }
        }
    }

    /// Thread `i` finished its stream (the slot saw its channel end).
    pub(super) fn release(&mut self, i: usize) {
        if i < self.threads.len() && !self.idle.contains(&i) {
            self.idle.push(i);
        }
    }

    /// Ends every thread once its current job stops (the caller drops the
    /// slots' receivers first, so a job blocked on a full channel stops).
    pub(super) fn shutdown(&mut self) {
        self.idle.clear();
        for t in self.threads.drain(..) {
            drop(t.jobs);
            if t.handle.join().is_err() {
                tracing::warn!("an interleave thread panicked outside the dataset function");
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A pool thread: runs jobs until the pool drops its end of `jobs`.
fn serve(jobs: Receiver<Box<Job>>) {
    while let Ok(job) = jobs.recv() {
        let Job { element, tx, name, args, f } = *job;
        let read = std::panic::AssertUnwindSafe(|| read(element, &tx, &name, &args, &f));
        if std::panic::catch_unwind(read).is_err() {
            let _ = tx.send(vec![Err(DatasetError::Function {
                name,
                message: "the interleave thread panicked".into(),
            })]);
        }
        // The stream was dropped in `read` (or while unwinding): the channel ends
        // after it (the module doc).
        drop(tx);
    }
}

/// Opens the job's stream and reads it into the slot's channel until the end,
/// an error, or the consumer going away.
fn read(element: Element, tx: &SyncSender<Vec<Item>>, name: &str, args: &[Arg], f: &DatasetFn) {
    let mut stream = match call(name, || f(element, args)) {
        Ok(stream) => stream,
        Err(e) => {
            let _ = tx.send(vec![Err(e)]);
            return;
        }
    };
    // Gathered while the channel is full (`interleave`'s module doc).
    let (mut chunk, mut bytes): (Vec<Item>, usize) = (Vec::new(), 0);
    loop {
        let item = match call(name, || Ok(stream.next())) {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(e) => Err(e),
        };
        // An element error is passed on like an element: the stream goes on.
        let failed = item.as_ref().is_err_and(|e| !e.is_element_error());
        bytes += item.as_ref().map_or(0, Element::byte_len);
        chunk.push(item);
        let whole = failed || chunk.len() >= CHUNK || bytes >= CHUNK_BYTES;
        let sent = if whole {
            // A failed send: the consumer is gone.
            if tx.send(std::mem::take(&mut chunk)).is_err() || failed {
                return;
            }
            true
        } else {
            match tx.try_send(std::mem::take(&mut chunk)) {
                Ok(()) => true,
                Err(TrySendError::Full(back)) => {
                    chunk = back;
                    false
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        };
        if sent {
            bytes = 0;
        }
    }
    if !chunk.is_empty() {
        let _ = tx.send(chunk);
    }
}
