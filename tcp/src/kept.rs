//! Free things kept for reuse, and the one policy by which what a busy
//! spell left goes back once it lies idle.
//!
//! [`Kept`] is a last-in first-out stack of free things (buffers, lists)
//! that remembers the fewest it held since its last [`Kept::trim`]: those
//! below that mark were not taken since, so they lay idle the whole
//! interval. Each trim gives back half of them (rounded up), the coldest
//! first (the bottom of the stack), keeping a floor: a steady load keeps
//! what it cycles through, and the peak of a burst is gone a few trims
//! after it ended. The stack's chunk pool (its chunks of each size and its
//! empty lists) and queue-pair mode's relays (their receive buffers,
//! `flowlane-qp`) keep their free memory this way, trimmed by their owners
//! on the same cadence (every second: the dataplane's worker, the relay's
//! own `on_tick`); this crate reads no clock, so the cadence is theirs.
//! [`TRIM_FLOOR_BYTES`] is the floor both keep of each kind.

/// Bytes of free things of one kind a trim keeps whatever was idle: a
/// quarter of a MiB, what an idle queue's next few connections take
/// without asking the allocator.
pub const TRIM_FLOOR_BYTES: usize = 256 * 1024;

/// Free things of one kind kept for reuse, last in first out, and the
/// fewest kept since the last trim (those below it were not taken since).
#[derive(Debug)]
pub struct Kept<T> {
    /// The free ones; the top is the warmest.
    free: Vec<T>,
    /// The fewest `free` held since the last [`Kept::trim`].
    low: usize,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept::new()
    }
}

impl<T> Kept<T> {
    /// None kept.
    pub const fn new() -> Self {
        Kept {
            free: Vec::new(),
            low: 0,
        }
    }

    /// The warmest one, if any.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        let t = self.free.pop();
        self.low = self.low.min(self.free.len());
        t
    }

    /// Keeps `t` (the caller bounds how many it keeps, by [`Kept::len`]).
    #[inline]
    pub fn push(&mut self, t: T) {
        self.free.push(t);
    }

    /// How many are kept.
    #[inline]
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Whether none is kept.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }

    /// The ones kept, coldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.free.iter()
    }

    /// Gives back half (rounded up) of those past `floor` that no one took
    /// since the last trim, the coldest first; how many went.
    pub fn trim(&mut self, floor: usize) -> usize {
        let idle = self.low.min(self.free.len()).saturating_sub(floor);
        let n = idle.div_ceil(2);
        self.free.drain(..n);
        if self.free.capacity() > 2 * self.free.len().max(floor) {
            self.free.shrink_to(self.free.len().max(floor));
        }
        self.low = self.free.len();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Freed since the last trim: not idle yet; then half of the idle ones
    /// past the floor go, round after round, the coldest first, down to
    /// the floor.
    #[test]
    fn a_trim_gives_back_half_of_the_idle_ones_past_the_floor() {
        let mut k = Kept::new();
        (0..20).for_each(|i| k.push(i));
        assert_eq!(k.trim(4), 0);
        assert_eq!(k.trim(4), 8);
        assert_eq!(k.iter().next(), Some(&8), "the coldest went first");
        // Three taken and given back since: 9 lay idle, 5 of them past
        // the floor: 3 go.
        let taken: Vec<i32> = (0..3).map(|_| k.pop().unwrap()).collect();
        taken.into_iter().for_each(|t| k.push(t));
        assert_eq!(k.trim(4), 3);
        while k.trim(4) > 0 {}
        assert_eq!(k.len(), 4, "the floor stays");
        assert!(!k.is_empty());
    }
}
