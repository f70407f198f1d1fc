//! Whole Ethernet frames packed one after another in one allocation, in
//! order: what one worker hands another through the mesh (frames of a
//! bucket that moved away, frames a worker without a queue gives its
//! carrier to send) and what a worker taking a bucket over holds. One
//! allocation and one inbox message carry up to [`BATCH_FRAMES`] of a
//! pass's frames for one destination, where each frame used to be its own
//! allocation and message.

/// Frames a batch makes room for at its first frame: the most one inbox
/// message carries.
pub(crate) const BATCH_FRAMES: usize = 32;

/// Frames in order, each with how often it was forwarded.
#[derive(Default)]
pub(crate) struct FrameBatch {
    /// The frames' bytes, back to back.
    bytes: Vec<u8>,
    /// Each frame's end in `bytes` and its hop count.
    ends: Vec<(u32, u8)>,
}

impl std::fmt::Debug for FrameBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameBatch")
            .field("frames", &self.ends.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl FrameBatch {
    /// Appends `frame`, forwarded `hops` times.
    pub(crate) fn push(&mut self, hops: u8, frame: &[u8]) {
        if self.bytes.capacity() == 0 {
            // Room for a whole batch of frames the size of the first (a
            // pass's frames for one destination are mostly alike: full
            // data segments, or bare ACKs), so that a batch of data frames
            // never grows (which copies the frames already in) and one of
            // ACKs takes a few KiB, not a batch of full frames.
            self.bytes.reserve(BATCH_FRAMES * frame.len().max(128));
            self.ends.reserve(BATCH_FRAMES);
        }
        self.bytes.extend_from_slice(frame);
        self.ends.push((self.bytes.len() as u32, hops));
    }

    /// Frames in the batch.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no frame.
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of its frames together.
    pub(crate) fn bytes_len(&self) -> usize {
        self.bytes.len()
    }

    /// Gives back the room reserved beyond its frames (a batch that goes
    /// before it is full: bounds on memory count what it holds, not what
    /// a full batch would).
    pub(crate) fn shrink(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    /// Bytes its allocations take (what bounds on memory count).
    pub(crate) fn allocated(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<(u32, u8)>()
    }

    /// Frame `i` (from 0) and its hop count.
    pub(crate) fn get(&self, i: usize) -> Option<(u8, &[u8])> {
        let &(end, hops) = self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(p) => self.ends[p].0,
            None => 0,
        };
        Some((hops, &self.bytes[start as usize..end as usize]))
    }

    /// The frames in order, with their hop counts.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u8, &[u8])> + '_ {
        let mut start = 0usize;
        self.ends.iter().map(move |&(end, hops)| {
            let f = &self.bytes[start..end as usize];
            start = end as usize;
            (hops, f)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::FrameBatch;

    #[test]
    fn frames_come_back_in_order_with_their_hops() {
        let mut b = FrameBatch::default();
        assert!(b.is_empty());
        assert_eq!(b.get(0), None);
        let frames: Vec<Vec<u8>> = (0..20u8)
            .map(|k| vec![k; 60 + usize::from(k) * 70])
            .collect();
        for (k, f) in frames.iter().enumerate() {
            b.push(k as u8 % 3, f);
        }
        b.push(1, &[]);
        assert_eq!(b.len(), 21);
        assert_eq!(
            b.bytes_len(),
            frames.iter().map(Vec::len).sum::<usize>(),
            "an empty frame adds no byte"
        );
        let back: Vec<(u8, Vec<u8>)> = b.iter().map(|(h, f)| (h, f.to_vec())).collect();
        for (k, f) in frames.iter().enumerate() {
            assert_eq!(back[k], (k as u8 % 3, f.clone()));
            assert_eq!(b.get(k), Some((k as u8 % 3, &f[..])));
        }
        assert_eq!(back[20], (1, Vec::new()));
        assert_eq!(b.get(21), None);
    }
}
