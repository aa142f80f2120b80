//! `[server] shard = "i/n"`: which discovered targets this instance scrapes.

use std::fmt;
use std::str::FromStr;

use llmwatch_core::stable_hash::fnv1a;
use serde::{Deserialize, Deserializer};

/// `[server] shard = "i/n"`: instance `index` of `count`. Each discovered
/// target belongs to exactly one shard, by a stable hash of its URL, so n
/// instances with the same discovery config split the fleet between them
/// without talking to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    /// Whether the target at `url` is this shard's.
    pub fn owns(&self, url: &str) -> bool {
        fnv1a(url.bytes()) % self.count == self.index
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("{text:?} is not a shard: write \"i/n\", 0 <= i < n, e.g. \"0/2\"");
        let (index, count) = text.split_once('/').ok_or_else(bad)?;
        let index: u64 = index.trim().parse().map_err(|_| bad())?;
        let count: u64 = count.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl<'de> Deserialize<'de> for Shard {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_every_target_exactly_once() {
        let shards: Vec<Shard> = ["0/3", "1/3", "2/3"]
            .iter()
            .map(|s| s.parse().expect("valid shard"))
            .collect();
        let mut per_shard = [0usize; 3];
        for i in 0..300 {
            let url = format!("http://10.0.{}.{}:8000", i / 250, i % 250);
            let owners: Vec<usize> = (0..3).filter(|&s| shards[s].owns(&url)).collect();
            assert_eq!(owners.len(), 1, "{url} owned by {owners:?}");
            per_shard[owners[0]] += 1;
        }
        // A fair hash: no shard gets less than a fifth of 300.
        assert!(per_shard.iter().all(|&n| n > 60), "{per_shard:?}");
        for bad in ["2/2", "1", "a/2", "0/0", "-1/2"] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains("not a shard"), "{bad}: {err}");
        }
        assert_eq!(shards[1].to_string(), "1/3");
    }
}
