//! Unit tests of the worker against a mock dispatcher (`mock_dispatcher`), read
//! through a plain tonic Worker client (`fixtures`); `scatter` tests the zero-copy
//! encoding, and `route` the GetElements response body and requests no tonic
//! client would send.

mod cache;
mod fixtures;
mod lifecycle;
mod mock_dispatcher;
mod route;
mod scatter;
mod splits;
mod streaming;
