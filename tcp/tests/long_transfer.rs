//! More than 2^32 bytes on one connection (issue 11): past that point the
//! sequence numbers of both ends wrap, and SND.UNA passes the ISS again,
//! which is where a stack that keys any state on `una == iss` (or keeps a
//! `recover` point older than 2^31) goes wrong. The application writes and
//! reads in random sizes over a link that loses, reorders and duplicates a
//! little, so that retransmissions, SACK recovery and the reassembler all
//! work across the wraps; every byte is checked in place.
//!
//! Too long for a debug build: `cargo test --release -p flowlane-tcp --test
//! long_transfer -- --ignored` (about 10 s here; `scripts/test.sh` runs it
//! so). The same harness runs on 64 MiB in the ordinary suite.

mod sim;

use flowlane_tcp::time::Duration;
use sim::{LinkConfig, Rng, Sim};

/// Period of the content: a prime, so that a misplaced block (an offset
/// off by any multiple of 2^32, or of a segment) shows.
const PERIOD: usize = 65_521;

/// The stream: byte `i` is `table[i % PERIOD]`.
struct Content {
    table: Vec<u8>,
}

impl Content {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        // Twice the period, so that any window of up to PERIOD bytes is
        // one contiguous slice.
        let mut table: Vec<u8> = (0..PERIOD).map(|_| rng.next_u64() as u8).collect();
        table.extend_from_within(..);
        Content { table }
    }

    /// `len` (≤ PERIOD) bytes of the stream from `offset`.
    fn at(&self, offset: u64, len: usize) -> &[u8] {
        let start = (offset % PERIOD as u64) as usize;
        &self.table[start..start + len]
    }
}

/// A moves `total` bytes to B in random writes and B reads them in random
/// reads, checking each; returns the run's retransmissions.
fn transfer(seed: u64, total: u64) -> u64 {
    let link = LinkConfig {
        loss: 0.000_2,
        duplicate: 0.000_1,
        reorder: 0.000_5,
        ..LinkConfig::default()
    };
    let mut sim = Sim::symmetric(seed, link);
    let (a, b) = sim.establish();
    let content = Content::new(seed);
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut buf = vec![0u8; PERIOD];
    let (mut sent, mut got) = (0u64, 0u64);
    let limit = sim.now + Duration::from_secs(3_600);
    while got < total {
        assert!(sim.now < limit, "stalled at {got} of {total} bytes");
        while sent < total {
            let len = (1 + rng.below(PERIOD as u64)).min(total - sent) as usize;
            match sim.a.send(a, content.at(sent, len)) {
                Ok(n) if n > 0 => sent += n as u64,
                _ => break,
            }
        }
        loop {
            let want = 1 + rng.below(PERIOD as u64) as usize;
            match sim.b.recv(b, &mut buf[..want]) {
                Ok(n) if n > 0 => {
                    assert!(
                        buf[..n] == *content.at(got, n),
                        "bytes {got}..{} differ from what A wrote",
                        got + n as u64
                    );
                    got += n as u64;
                }
                _ => break,
            }
        }
        sim.run_for(Duration::from_millis(1));
    }
    assert_eq!(sim.b.stats().bytes_in, total);
    sim.a.stats().retransmits
}

#[test]
fn sixty_four_mib_in_random_sizes_arrive_intact() {
    transfer(1, 64 << 20);
}

#[test]
#[ignore = "minutes in a debug build: run with --release -- --ignored"]
fn more_than_four_gib_on_one_connection_arrive_intact() {
    let total = (1u64 << 32) + (300 << 20);
    let retransmits = transfer(2, total);
    eprintln!("{total} bytes, {retransmits} retransmissions");
    assert!(retransmits > 0, "the link lost segments on the way");
}
