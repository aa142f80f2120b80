//! One experiment at a time per daemon (`POST /api/v1/experiments`): a flag
//! taken by the request that starts one and given back when its task ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One experiment at a time per daemon.
#[derive(Clone, Default)]
pub struct ExperimentSlot(Arc<AtomicBool>);

impl ExperimentSlot {
    pub fn try_take(&self) -> Option<SlotGuard> {
        self.0
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| SlotGuard(self.0.clone()))
    }
}

pub struct SlotGuard(Arc<AtomicBool>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
