//! Where data leaves llmwatch: alert notifications (webhooks, Alertmanager)
//! and remote write.

pub mod notify;
pub mod remote_write;
