//! The metrics pages behind the endpoint: one scrape of the services at a
//! time, on a blocking thread, shared by every request that arrives while
//! it runs (a request takes the page of the scrape under way rather than
//! wait for it and then scrape again: each answered within one scrape
//! timeout), each format rendered once per scrape, and its bytes shared by
//! every response that carries it (a page of many services is tens of
//! megabytes). What requests cost is bounded whatever they do, wait, or go
//! away: one scrape and its rendering under way, no work queued per
//! request.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::watch;

use crate::metrics::{render, Format};
use crate::registry::Services;

/// The pages of one scrape: one per format asked for while it ran.
type Made = Arc<Vec<(Format, Bytes)>>;

/// The scrape under way.
struct UnderWay {
    /// The formats its requests want (at most one of each).
    formats: Vec<Format>,
    /// Its pages, once made; closed unmade if making them failed.
    made: watch::Receiver<Option<Made>>,
}

/// The services' pages, made for the requests that ask.
pub(crate) struct Pages {
    services: Arc<Services>,
    under_way: Mutex<Option<UnderWay>>,
}

impl Pages {
    /// Pages of `services`.
    pub(crate) fn new(services: Arc<Services>) -> Arc<Pages> {
        Arc::new(Pages {
            services,
            under_way: Mutex::new(None),
        })
    }

    /// The page in `format` of the scrape under way, or of one begun now
    /// (on a blocking thread of the current runtime); None if making it
    /// failed (a bug, said in the log).
    pub(crate) async fn page(self: &Arc<Self>, format: Format) -> Option<Bytes> {
        let mut made = {
            let mut under_way = self.under_way.lock().unwrap_or_else(|e| e.into_inner());
            match under_way.as_mut() {
                Some(u) => {
                    if !u.formats.contains(&format) {
                        u.formats.push(format);
                    }
                    u.made.clone()
                }
                None => {
                    let (tx, rx) = watch::channel(None);
                    *under_way = Some(UnderWay {
                        formats: vec![format],
                        made: rx.clone(),
                    });
                    let me = self.clone();
                    tokio::task::spawn_blocking(move || me.make(&tx));
                    rx
                }
            }
        };
        let pages = made.wait_for(Option::is_some).await.ok()?.clone()?;
        pages
            .iter()
            .find(|(f, _)| *f == format)
            .map(|(_, page)| page.clone())
    }

    /// Scrapes, and renders the pages asked for meanwhile; a request that
    /// arrives after that begins the next scrape. A panic (a bug) is said
    /// and leaves the requests without a page, the next scrape unhindered.
    fn make(&self, tx: &watch::Sender<Option<Made>>) {
        let scraped = std::panic::catch_unwind(AssertUnwindSafe(|| self.services.scrape()));
        let formats = self
            .under_way
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .map_or_else(Vec::new, |u| u.formats);
        let made = scraped.and_then(|scrape| {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                formats
                    .iter()
                    .map(|&f| (f, Bytes::from(render(&scrape, f))))
                    .collect::<Vec<_>>()
            }))
        });
        match made {
            Ok(pages) => {
                let _ = tx.send(Some(Arc::new(pages)));
            }
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!("metrics endpoint: making the page failed: {why}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::time::{Duration, Instant};

    /// A run directory of its own, with a service that never answers.
    fn silent(tag: &str) -> (std::path::PathBuf, UnixListener) {
        let dir = std::env::temp_dir().join(format!("fl-pages-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let l = UnixListener::bind(dir.join("silent.1.sock")).unwrap();
        (dir, l)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Requests that overlap a scrape take its page: the second, arriving
    /// halfway through the first's scrape of a service that never answers,
    /// is answered when that scrape ends (not after a scrape of its own),
    /// with the very same bytes.
    #[test]
    fn overlapping_requests_share_one_scrape_and_its_bytes() {
        let (dir, _l) = silent("overlap");
        let timeout = Duration::from_millis(600);
        let services = Arc::new(Services::new(dir.clone(), timeout));
        let pages = Pages::new(services);
        let began = Instant::now();
        let (a, b, b_took) = runtime().block_on(async {
            let first = tokio::spawn({
                let pages = pages.clone();
                async move { pages.page(Format::Text).await }
            });
            tokio::time::sleep(timeout / 2).await;
            let second = pages.page(Format::Text).await;
            let b_took = began.elapsed();
            (first.await.unwrap(), second, b_took)
        });
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(b_took < timeout * 3 / 2, "{b_took:?}");
        assert_eq!(a.as_ptr(), b.as_ptr(), "one page, shared");
        let unanswered = "flowlane_daemon_services_unanswered_total 1\n";
        assert!(
            String::from_utf8_lossy(&a).contains(unanswered),
            "one scrape"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Requests that go away while a scrape runs leave no work behind: the
    /// next request after it is answered by one more scrape, not by the
    /// queue of theirs.
    #[test]
    fn requests_that_go_away_leave_no_work_queued() {
        let (dir, _l) = silent("gone");
        let timeout = Duration::from_millis(200);
        let services = Arc::new(Services::new(dir.clone(), timeout));
        let pages = Pages::new(services);
        runtime().block_on(async {
            for _ in 0..200 {
                let p = pages.clone();
                let gone = tokio::spawn(async move { p.page(Format::Text).await });
                tokio::task::yield_now().await;
                gone.abort();
            }
            // The scrape they began ends; one more is the next request's.
            tokio::time::sleep(timeout * 2).await;
            let page = pages.page(Format::Text).await.unwrap();
            let page = String::from_utf8_lossy(&page).into_owned();
            assert!(
                page.contains("flowlane_daemon_services_unanswered_total 2\n"),
                "{page}"
            );
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
