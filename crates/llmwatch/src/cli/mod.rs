//! The one-shot commands: `bench`, `sweep`, `inspect`, `sim`, `db`.

pub mod bench;
pub mod db;
pub mod inspect;
pub mod sim;
pub mod sweep;
pub mod sweep_render;
