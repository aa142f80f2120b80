//! The one-shot commands: `bench`, `sweep`, `inspect`, `sim`, `predict`, `experiment`, `db`.

pub mod bench;
pub mod conversation;
pub mod db;
pub mod experiment;
pub mod inspect;
pub mod predict;
pub mod sim;
pub mod sweep;
pub mod sweep_render;
pub mod trace;
