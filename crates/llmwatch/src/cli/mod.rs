//! The one-shot commands: `bench`, `sweep`, `inspect`, `sim`, `predict`, `experiment`, `db`.

pub mod bench;
pub mod conversation;
pub mod dataset;
pub mod db;
pub mod experiment;
pub mod inspect;
pub mod observed;
pub mod predict;
pub mod sim;
pub mod sweep;
pub mod sweep_render;
pub mod trace;

/// Writes `value` as JSON to `path`, every URL in it redacted (a target's
/// credentials never reach a result file), and says where.
pub(crate) fn write_json_redacted<T: serde::Serialize>(
    path: &std::path::Path,
    value: &T,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let json = serde_json::to_string(value)?;
    std::fs::write(path, llmwatch_core::redact::redact_urls_in(&json))
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
