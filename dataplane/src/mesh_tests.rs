//! The mesh between workers: frames go in batches, in order, ahead of the
//! next message to their destination; full inboxes and a carrier's full
//! TX ring keep them in order within their bounds and drop (counted)
//! beyond.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Mesh, Message, Mover, Work, INBOX_BYTES, MESSAGES_PER_PASS, STALLED_BYTES, TO_SEND_MAX,
};
use crate::ephemeral::rss_state;
use crate::frame_batch::BATCH_FRAMES;

/// Worker 0 and worker 1 of a two-queue mesh whose every bucket is on
/// queue 1; worker 0 sends through worker 1 (its carrier).
pub(super) fn pair() -> (Mover, Mover) {
    let mesh = Arc::new(Mesh::new(2).expect("eventfds"));
    let rss = rss_state(&[0x6d; 40], &[1; 128], 2).expect("valid RSS");
    let mut a = Mover::new(0, mesh.clone(), rss.clone());
    a.set_carrier(1);
    (a, Mover::new(1, mesh, rss))
}

/// A full-sized frame whose first four bytes number it.
fn numbered(k: u32) -> Vec<u8> {
    let mut f = vec![0u8; 1514];
    f[..4].copy_from_slice(&k.to_be_bytes());
    f
}

fn number(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[..4].try_into().expect("numbered"))
}

/// The numbers of the frames `b` takes from its inbox until it is empty.
fn forwarded_in(b: &mut Mover) -> Vec<u32> {
    let mut got = Vec::new();
    while !b.mesh.inboxes[b.me as usize].rx.is_empty() {
        for w in b.take_work(Duration::ZERO) {
            let Work::Frames(batches) = w else {
                panic!("only frames were sent")
            };
            got.extend(
                batches
                    .iter()
                    .flat_map(|b| b.iter())
                    .map(|(_, f)| number(f)),
            );
        }
    }
    got
}

#[test]
fn forwarded_frames_go_in_batches_ahead_of_the_next_message() {
    let (mut a, b) = pair();
    for k in 0..100 {
        a.forward(Duration::ZERO, 0, 0, &numbered(k));
    }
    // Full batches went at once; the rest goes before the next message.
    a.queue_message(1, Message::Cancel { bucket: 3 });
    let inbox = &b.mesh.inboxes[1];
    let mut seen = Vec::new();
    let mut next = 0;
    while let Ok(m) = inbox.rx.try_recv() {
        match m {
            Message::Frames(batch) => {
                for (hops, f) in batch.iter() {
                    assert_eq!((hops, number(f)), (1, next), "in order, forwarded once");
                    next += 1;
                }
                seen.push(batch.len());
            }
            Message::Cancel { bucket: 3 } => seen.push(0),
            _ => panic!("unexpected message"),
        }
    }
    assert_eq!(seen, [BATCH_FRAMES, BATCH_FRAMES, BATCH_FRAMES, 4, 0]);
    assert_eq!(a.stats.frames_forwarded, 100);
}

#[test]
fn a_full_inbox_keeps_batches_in_order_and_drops_past_its_bound() {
    let (mut a, mut b) = pair();
    // Enough frames to fill the inbox and the sender's stalled messages.
    let per_batch = {
        let mut one = crate::frame_batch::FrameBatch::default();
        one.push(0, &numbered(0));
        one.allocated()
    };
    let fit = (INBOX_BYTES + STALLED_BYTES) / per_batch * BATCH_FRAMES;
    let sent = (fit + 10 * BATCH_FRAMES) as u32;
    for k in 0..sent {
        a.forward(Duration::ZERO, 0, 0, &numbered(k));
    }
    a.flush();
    let dropped = a.stats.forward_dropped;
    assert!(dropped > 0, "past both bounds frames are dropped");
    assert_eq!(dropped % BATCH_FRAMES as u64, 0, "whole batches");
    assert!(a.stalled_bytes <= STALLED_BYTES);
    // The receiver takes its inbox a pass at a time; the sender retries.
    let mut got = Vec::new();
    for _ in 0..1_000 {
        let before = got.len();
        let work = b.take_work(Duration::ZERO);
        for w in work {
            if let Work::Frames(batches) = w {
                let n: usize = batches.iter().map(|b| b.len()).sum();
                assert!(n <= MESSAGES_PER_PASS + BATCH_FRAMES, "a pass's frames");
                got.extend(
                    batches
                        .iter()
                        .flat_map(|b| b.iter())
                        .map(|(_, f)| number(f)),
                );
            }
        }
        a.flush();
        if got.len() == before && a.stalled.is_empty() {
            break;
        }
    }
    assert_eq!(a.stalled_bytes, 0);
    assert_eq!(got.len() as u64 + dropped, u64::from(sent));
    let expected: Vec<u32> = (0..got.len() as u32).collect();
    assert_eq!(
        got, expected,
        "what arrives is in order, the dropped ones the last"
    );
    assert_eq!(
        b.mesh.inboxes[1]
            .batch_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn frames_to_send_wait_in_order_for_room_on_the_tx_ring() {
    let (mut a, mut b) = pair();
    for k in 0..50 {
        a.transmit_via_carrier(&numbered(k));
    }
    a.flush();
    assert!(
        forwarded_in(&mut b).is_empty(),
        "frames to send are no work"
    );
    let mut sent = Vec::new();
    let mut room = 20;
    b.send_transmits(|f| {
        if room == 0 {
            return None;
        }
        room -= 1;
        sent.push(number(f));
        Some(true)
    });
    assert_eq!(sent, (0..20).collect::<Vec<_>>());
    // One too long for a TX frame: dropped, counted, the rest sent.
    b.send_transmits(|f| {
        sent.push(number(f));
        Some(number(f) != 30)
    });
    assert_eq!(sent, (0..50).collect::<Vec<_>>());
    assert_eq!(b.stats.forward_dropped, 1);
    assert_eq!((a.stats.spill_tx_out, b.stats.spill_tx_in), (50, 50));
}

#[test]
fn a_carrier_keeps_at_most_its_bound_of_frames_to_send() {
    let (mut a, mut b) = pair();
    let extra = 3 * BATCH_FRAMES as u32;
    for k in 0..TO_SEND_MAX as u32 + extra {
        a.transmit_via_carrier(&numbered(k));
    }
    a.flush();
    assert!(forwarded_in(&mut b).is_empty());
    assert_eq!(b.stats.forward_dropped, u64::from(extra));
    let mut sent = Vec::new();
    b.send_transmits(|f| {
        sent.push(number(f));
        Some(true)
    });
    assert_eq!(sent, (0..TO_SEND_MAX as u32).collect::<Vec<_>>());
}
