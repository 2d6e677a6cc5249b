//! The one way locks are taken: a poisoned lock is recovered, not propagated. Every value
//! guarded by a `Mutex` here is left consistent between statements, and a daemon serving a
//! filesystem must keep answering after one request panicked while holding a lock.

use std::sync::{Mutex, MutexGuard};

pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
