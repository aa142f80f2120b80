//! The one-shot commands: `bench`, `sweep`, `inspect`, `sim`, `predict`, `db`.

pub mod bench;
pub mod db;
pub mod inspect;
pub mod predict;
pub mod sim;
pub mod sweep;
pub mod sweep_render;
