//! Small helpers shared by more than one layer.

pub mod histogram;
pub mod memory;
pub mod swap_list;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use swap_list::SwapList;

/// A mutex's guard, whether or not a holder panicked. Every critical section in this
/// crate leaves its data whole at each step (or no worse than a crash would), so one
/// task's panic must not stop the others: the poison is ignored and serving goes on.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
