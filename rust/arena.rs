//! An append-only arena: a value pushed through a shared reference stays where it is until the
//! arena drops, so a caller can keep `&T` to earlier values while it pushes more.
//!
//! The window builder keeps every message it reads here and hands out plain references to them,
//! so reading a message again, or holding it in a turn or an open call, is a copy of a pointer.

use std::cell::{Cell, OnceCell};

/// Size of the first chunk; chunk `k` holds `FIRST_CHUNK << k` values, allocated on first use.
const FIRST_CHUNK: usize = 64;
/// Enough chunks for more values than any history can hold.
const CHUNKS: usize = 32;

pub struct Arena<T> {
    len: Cell<usize>,
    chunks: [OnceCell<Box<[OnceCell<T>]>>; CHUNKS],
}

impl<T> Arena<T> {
    pub fn new() -> Arena<T> {
        Arena {
            len: Cell::new(0),
            chunks: std::array::from_fn(|_| OnceCell::new()),
        }
    }

    /// Number of values pushed.
    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Chunk and slot of the value at `position`: chunk k starts at FIRST_CHUNK * (2^k - 1).
    fn locate(position: usize) -> Option<(usize, usize)> {
        let scaled = position / FIRST_CHUNK + 1;
        let chunk = (usize::BITS - 1 - scaled.leading_zeros()) as usize;
        if chunk >= CHUNKS {
            return None;
        }
        Some((chunk, position - FIRST_CHUNK * ((1 << chunk) - 1)))
    }

    /// Stores `value` for the arena's life; gives it back when the arena is full.
    pub fn push(&self, value: T) -> Result<&T, T> {
        let position = self.len.get();
        let Some((chunk, slot)) = Self::locate(position) else {
            return Err(value);
        };
        let Some(cells) = self.chunks.get(chunk) else {
            return Err(value);
        };
        let cells =
            cells.get_or_init(|| (0..FIRST_CHUNK << chunk).map(|_| OnceCell::new()).collect());
        let Some(cell) = cells.get(slot) else {
            return Err(value);
        };
        self.len.set(position + 1);
        Ok(cell.get_or_init(|| value))
    }

    /// The value pushed at `position`, if there is one.
    pub fn get(&self, position: usize) -> Option<&T> {
        if position >= self.len.get() {
            return None;
        }
        let (chunk, slot) = Self::locate(position)?;
        self.chunks.get(chunk)?.get()?.get(slot)?.get()
    }
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_stay_valid_across_chunks() {
        let arena = Arena::new();
        let mut kept = Vec::new();
        for value in 0..5 * FIRST_CHUNK {
            kept.push(arena.push(value).unwrap_or(&usize::MAX));
        }
        assert_eq!(arena.len(), 5 * FIRST_CHUNK);
        for (expected, value) in kept.iter().enumerate() {
            assert_eq!(**value, expected);
            assert_eq!(arena.get(expected), Some(&expected));
        }
        assert_eq!(arena.get(5 * FIRST_CHUNK), None);
    }

    #[test]
    fn chunk_boundaries() {
        let arena = Arena::new();
        for value in 0..(FIRST_CHUNK * 7 + 1) {
            assert_eq!(arena.push(value), Ok(&value));
        }
    }
}
