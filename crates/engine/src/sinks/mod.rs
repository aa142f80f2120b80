//! Where alert notifications go: webhooks and Alertmanager.

pub mod notify;
