//! The targets this instance watches right now: those `[[targets]]` lists
//! and those service discovery found (this shard's share). Scrapes,
//! canaries, the live diagnosis, alerts, retention, pages and the API all
//! read it here, so a discovered target appears everywhere at once and a
//! removed one leaves everywhere at once.

use std::sync::Arc;

use llmwatch_config::TargetConfig;
use tokio::sync::watch;

/// A shared, watchable list of targets (cheap to clone).
#[derive(Clone)]
pub struct TargetSet {
    sender: Arc<watch::Sender<Arc<Vec<TargetConfig>>>>,
}

impl std::fmt::Debug for TargetSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TargetSet").field(&self.names()).finish()
    }
}

impl TargetSet {
    /// Starts with the configured targets.
    pub fn new(configured: Vec<TargetConfig>) -> TargetSet {
        let (sender, _) = watch::channel(Arc::new(configured));
        TargetSet {
            sender: Arc::new(sender),
        }
    }

    /// Every target now, configured first, then discovered by group.
    pub fn current(&self) -> Arc<Vec<TargetConfig>> {
        self.sender.borrow().clone()
    }

    /// One target by name.
    pub fn find(&self, name: &str) -> Option<TargetConfig> {
        self.sender
            .borrow()
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    /// Every target's name.
    pub fn names(&self) -> Vec<String> {
        self.sender
            .borrow()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    /// Wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Vec<TargetConfig>>> {
        self.sender.subscribe()
    }

    /// Replaces what discovery group `group` found with `found`; targets
    /// whose name another group or `[[targets]]` already holds are left
    /// out and returned. Watchers wake only when something changed.
    pub fn replace_group(&self, group: &str, found: Vec<TargetConfig>) -> Vec<TargetConfig> {
        let mut clashing = Vec::new();
        self.sender.send_if_modified(|targets| {
            let mut next: Vec<TargetConfig> = targets
                .iter()
                .filter(|t| t.discovered_by.as_deref() != Some(group))
                .cloned()
                .collect();
            for target in found {
                if next.iter().any(|t| t.name == target.name) {
                    clashing.push(target);
                } else {
                    next.push(target);
                }
            }
            let changed = targets.as_slice() != next.as_slice();
            if changed {
                *targets = Arc::new(next);
            }
            changed
        });
        clashing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmwatch_config::discovery::{targets_of, TargetGroup};
    use llmwatch_config::Config;

    fn config() -> Config {
        Config::parse(
            "[[targets]]\nname = \"static\"\nurl = \"http://127.0.0.1:1\"\n\
             [[discovery]]\nname = \"fleet\"\nfiles = [\"sd.json\"]\n",
            std::path::Path::new("test.toml"),
        )
        .expect("config parses")
    }

    fn found(config: &Config, addresses: &[&str]) -> Vec<TargetConfig> {
        let group = TargetGroup {
            targets: addresses.iter().map(|a| a.to_string()).collect(),
            labels: Default::default(),
        };
        targets_of(&config.discovery[0], &[group]).0
    }

    #[test]
    fn groups_are_replaced_whole_and_watchers_wake_only_on_change() {
        let config = config();
        let set = TargetSet::new(config.targets.clone());
        let mut watcher = set.subscribe();
        watcher.mark_unchanged();
        set.replace_group("fleet", found(&config, &["a:1", "b:2"]));
        assert!(watcher.has_changed().expect("sender alive"));
        assert_eq!(set.names(), ["static", "fleet-a-1", "fleet-b-2"]);
        watcher.mark_unchanged();
        set.replace_group("fleet", found(&config, &["a:1", "b:2"]));
        assert!(!watcher.has_changed().expect("sender alive"), "no change");
        set.replace_group("fleet", found(&config, &["b:2"]));
        assert_eq!(set.names(), ["static", "fleet-b-2"]);
        assert!(set.find("fleet-a-1").is_none());
    }

    #[test]
    fn a_name_already_taken_is_left_out() {
        let config = config();
        let set = TargetSet::new(config.targets.clone());
        let mut taken = found(&config, &["x:1"]);
        taken[0].name = "static".into();
        let clashing = set.replace_group("fleet", taken);
        assert_eq!(clashing.len(), 1);
        assert_eq!(set.names(), ["static"]);
        assert_eq!(
            set.find("static").map(|t| t.url),
            Some("http://127.0.0.1:1".into())
        );
    }
}
