//! Unit tests of the worker against a mock dispatcher (`mock_dispatcher`), read
//! through a plain tonic Worker client (`fixtures`).

mod cache;
mod fixtures;
mod lifecycle;
mod mock_dispatcher;
mod splits;
mod streaming;
