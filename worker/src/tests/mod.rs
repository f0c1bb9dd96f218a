//! Unit tests of the worker against a mock dispatcher (`mock_dispatcher`), read
//! through a plain tonic Worker client (`fixtures`); `buffer` tests a task's buffer
//! on its own, `scatter` the zero-copy encoding, and `route` the GetElements
//! response body and requests no tonic client would send; `user_function` what a
//! reader gets when a user's function fails (with a fake Python executor).

mod buffer;
mod cache;
mod credit;
mod exactly_once;
mod fixtures;
mod lifecycle;
mod mock_dispatcher;
mod origins;
mod route;
mod scatter;
mod splits;
mod streaming;
mod user_function;
