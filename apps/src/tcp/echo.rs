//! `echo-server`: echoes every byte back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use flowlane_app::conn_state::{export_entry, import_entry};
use flowlane_app::{CloseReason, ConnHandle, ConnHandler, ConnMap, ConnState, Net, SynFilter};

use super::idle::{IdleCounters, IdleSweep};
use super::AllowFrom;

/// Echoes every byte back; closes when the peer has closed and everything
/// was echoed, or when a connection went `--idle-timeout` without a byte
/// either way.
pub(super) struct Echo {
    buf: Vec<u8>,
    allow: AllowFrom,
    /// When each connection last moved a byte (or opened).
    active: ConnMap<Duration>,
    idle: IdleSweep,
    counters: Arc<IdleCounters>,
}

impl Echo {
    /// A handler with a 16 KiB copy buffer shared by its connections,
    /// taking connections from the peers `allow` names, closing those idle
    /// for `idle_timeout` (counted in `counters`, shared by the cores).
    pub(super) fn new(
        allow: AllowFrom,
        idle_timeout: Option<Duration>,
        counters: Arc<IdleCounters>,
    ) -> Echo {
        Echo {
            buf: vec![0; 16384],
            allow,
            active: ConnMap::new(),
            idle: IdleSweep::new(idle_timeout),
            counters,
        }
    }

    fn pump(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let moved = net.echo(conn, &mut self.buf);
        // Only connections still watched (not closed for idleness already:
        // their last callbacks may still come) are marked active.
        if let (true, Some(active)) = (moved > 0, self.active.get_mut(conn)) {
            *active = net.now();
        }
    }
}

impl ConnHandler for Echo {
    fn syn_filter(&self, _port: u16) -> Option<SynFilter> {
        self.allow.filter()
    }
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let _ = net.set_nodelay(conn, true);
        self.active.insert(conn, net.now());
    }
    fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pump(net, conn);
    }
    fn on_writable(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pump(net, conn);
    }
    fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        self.pump(net, conn);
    }
    fn on_export(&mut self, _net: &mut dyn Net, conn: ConnHandle) -> Option<ConnState> {
        export_entry(&mut self.active, conn)
    }
    fn on_import(&mut self, net: &mut dyn Net, conn: ConnHandle, state: Option<ConnState>) {
        if !import_entry(&mut self.active, conn, state) {
            self.active.insert(conn, net.now());
        }
    }
    fn on_closed(&mut self, _net: &mut dyn Net, conn: ConnHandle, _r: CloseReason) {
        self.active.remove(conn);
    }
    fn on_tick(&mut self, net: &mut dyn Net) {
        for conn in self.idle.due(net.now(), &self.active, |t| *t) {
            self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            let _ = net.close(conn);
            self.active.remove(conn);
        }
    }
}
