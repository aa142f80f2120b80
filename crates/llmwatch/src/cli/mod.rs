//! The one-shot commands: `bench`, `sweep`, `inspect`, `sim`.

pub mod bench;
pub mod inspect;
pub mod sim;
pub mod sweep;
pub mod sweep_render;
