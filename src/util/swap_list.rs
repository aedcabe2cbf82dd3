//! An insertion-ordered set whose removal moves the last element into the hole — the
//! reference's `ms` array. Clients see this order in `list-tubes` and
//! `list-tubes-watched` ([default,a,b,c] minus a is [default,c,b]), so both lists use it.
//!
//! Invariant: `index[items[i]] == i` for every `i`.

use foldhash::HashMap;
use std::hash::Hash;

#[derive(Clone, Debug)]
pub struct SwapList<T: Clone + Eq + Hash> {
    items: Vec<T>,
    index: HashMap<T, usize>,
}

impl<T: Clone + Eq + Hash> Default for SwapList<T> {
    fn default() -> Self {
        SwapList {
            items: Vec::new(),
            index: HashMap::default(),
        }
    }
}

impl<T: Clone + Eq + Hash> SwapList<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn contains(&self, item: &T) -> bool {
        self.index.contains_key(item)
    }

    /// Where `item` stands in the list.
    pub fn position(&self, item: &T) -> Option<usize> {
        self.index.get(item).copied()
    }

    /// Append `item` unless present; true when it was added.
    pub fn insert(&mut self, item: T) -> bool {
        if self.index.contains_key(&item) {
            return false;
        }
        self.index.insert(item.clone(), self.items.len());
        self.items.push(item);
        true
    }

    /// Remove `item`, moving the last element into its place; true when it was present.
    pub fn remove(&mut self, item: &T) -> bool {
        let Some(i) = self.index.remove(item) else {
            return false;
        };
        self.items.swap_remove(i);
        if let Some(moved) = self.items.get(i) {
            self.index.insert(moved.clone(), i);
        }
        true
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    pub fn as_slice(&self) -> &[T] {
        &self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_moves_last_into_hole() {
        let mut l = SwapList::new();
        for t in ["default", "a", "b", "c"] {
            l.insert(t);
        }
        l.remove(&"a");
        assert_eq!(l.as_slice(), ["default", "c", "b"]);
        let mut w = SwapList::new();
        for t in ["default", "a", "b", "c"] {
            w.insert(t);
        }
        w.remove(&"default");
        assert_eq!(w.as_slice(), ["c", "a", "b"]);
    }
}
