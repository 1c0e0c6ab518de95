//! The HTTP endpoints, one module per API.

pub mod chat;
pub mod common;
pub mod completions;
pub mod dashboard;
pub mod info;
pub mod messages;
pub mod responses;
pub mod responses_events;
pub mod responses_ws;
