//! herald's wire contract, protocol 1.2 (version 1 and what 1.1 and 1.2 add): the shapes,
//! names and codes of `docs/protocol.md`, and nothing else. No I/O and no async: the server
//! and the load tool build on it. The version a server announces in `hello` is
//! [`reply::PROTOCOL_VERSION`].
//!
//! The golden fixtures in `fixtures/*.json` (requests, replies, pushes and stored
//! events of protocol 1 and 1.1; 1.2's in `fixtures/*-1.2.json`) are this crate's
//! wire types written out: `tests/fixtures.rs` checks that each parses into these
//! types and encodes back exactly, and the TypeScript SDK's
//! `test/unit/fixtures.test.ts` reads the same files, 1.2's included, against its own
//! types, so neither side can rename or drop a field alone. `tests/docs.rs` checks that
//! the version `docs/protocol.md` and the README state is [`reply::PROTOCOL_VERSION`].
//!
//! Parsing is split in two steps on purpose. [`request::parse_frame`] first
//! decides whether a frame is a request at all (a JSON object with an integer
//! `id` and a string `op`); only then are the op's arguments checked. The two
//! failures are answered differently: a frame that is not a request costs the
//! client its connection (close 4000), a request with bad arguments only gets a
//! `bad_request` reply.

pub mod args;
pub mod codes;
pub mod event;
pub mod frame;
pub mod ids;
pub mod limits;
pub mod reply;
pub mod request;
pub mod scan;

pub use codes::{CloseCode, ErrorCode};
pub use event::{Event, EventType, FileRef, Replies, StreamState};
pub use request::{BadFrame, Op, Request};
