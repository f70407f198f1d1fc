//! The frames the harness lends the stack (zero-copy receive): each peer data segment's
//! payload is delivered from a frame of its own, at an offset, and the frame is kept
//! until the stack releases it. Reading a frame the stack does not hold, or a frame
//! released twice, panics.

use flowlane_tcp::FrameStore;

/// Where a payload starts in its frame (as behind Ethernet, IP and TCP headers).
pub(crate) const PAYLOAD_OFFSET: u32 = 66;

#[derive(Debug, Default)]
pub(crate) struct Frames {
    slots: Vec<Option<Vec<u8>>>,
    free: Vec<u32>,
    held: usize,
}

impl FrameStore for Frames {
    fn frame(&self, id: u32) -> &[u8] {
        self.slots[id as usize]
            .as_deref()
            .expect("the stack read a frame it does not hold")
    }
}

impl Frames {
    /// A frame holding `payload` at [`PAYLOAD_OFFSET`]; its id.
    pub(crate) fn lend(&mut self, payload: &[u8]) -> u32 {
        let mut f = vec![0xee; PAYLOAD_OFFSET as usize];
        f.extend_from_slice(payload);
        self.held += 1;
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(f);
                id
            }
            None => {
                self.slots.push(Some(f));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The frame is the harness's again.
    pub(crate) fn give_back(&mut self, id: u32) {
        assert!(
            self.slots[id as usize].take().is_some(),
            "frame {id} released twice, or never lent"
        );
        self.held -= 1;
        self.free.push(id);
    }

    /// Frames lent out now.
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}
