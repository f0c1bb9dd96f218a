//! Sluice's client library.
//!
//! # Layout
//! - [`retry`]: [`RetryPolicy`] — bounded backoff for every remote call.
//! - [`dispatcher`]: [`DispatcherClient`] — retrying calls to one or more dispatchers
//!   (also used by workers).
//! - [`error`]: [`ClientError`].

pub mod dispatcher;
pub mod error;
pub mod retry;

pub use dispatcher::DispatcherClient;
pub use error::ClientError;
pub use retry::RetryPolicy;
