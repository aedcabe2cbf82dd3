//! Small data structures shared by more than one layer.

pub mod swap_list;

pub use swap_list::SwapList;
