//! `echo-server`: echoes every byte back.

use flowlane_app::{ConnHandle, ConnHandler, Net, SynFilter};

use super::AllowFrom;

/// Echoes every byte back; closes when the peer has closed and everything
/// was echoed.
pub(super) struct Echo {
    buf: Vec<u8>,
    allow: AllowFrom,
}

impl Echo {
    /// A handler with a 16 KiB copy buffer shared by its connections,
    /// taking connections from the peers `allow` names.
    pub(super) fn new(allow: AllowFrom) -> Echo {
        Echo {
            buf: vec![0; 16384],
            allow,
        }
    }

    fn pump(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        net.echo(conn, &mut self.buf);
    }
}

impl ConnHandler for Echo {
    fn syn_filter(&self, _port: u16) -> Option<SynFilter> {
        self.allow.filter()
    }
    fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
        let _ = net.set_nodelay(conn, true);
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
}
