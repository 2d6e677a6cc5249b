//! Credentials that expire, renewed before they do, as object_store's credential provider.
//!
//! object_store asks its provider for credentials before every request, so the answer comes
//! from memory until the renewal time: some minutes before the expiry (at most 5, at most
//! half the credentials' lifetime, so short-lived ones are renewed too). The request that
//! finds that time passed renews them; requests meanwhile go on with the old ones. A renewal
//! that fails is logged once for the whole run of failures and retried later, and the old
//! credentials are used as long as there are any: a request fails only once the store refuses
//! them. `zarr_mount_credential_renewals_total` and `..._renewal_failures_total` count both.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

/// Where credentials come from (a chain of sources).
#[async_trait]
pub trait Renew: std::fmt::Debug + Send + Sync + 'static {
    type Credential: Send + Sync + 'static;
    /// Fresh credentials, their expiry (None: they do not expire) and the name of the source
    /// that gave them; `Err` is one line without secrets.
    async fn fetch(&self) -> Result<(Self::Credential, Option<SystemTime>, String), String>;
}

/// Renew at most this long before the expiry.
const MAX_MARGIN: Duration = Duration::from_secs(300);
/// Never renew sooner than this after a fetch (credentials that are already expired when
/// handed out are used until the store refuses them, not fetched for every request).
const MIN_HOLD: Duration = Duration::from_secs(1);
/// After a failed renewal, the next try waits at least this long, and at most `MAX_RETRY`.
const MIN_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);

struct Held<C> {
    credential: Arc<C>,
    /// When to renew (None: never).
    renew_at: Option<SystemTime>,
    expiry: Option<SystemTime>,
}

/// The clock credentials' expiries are on (a function, so tests can move it).
pub type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

pub struct RenewingCredentials<S: Renew> {
    source: S,
    held: Mutex<Option<Held<S::Credential>>>,
    /// One renewal at a time.
    renewing: tokio::sync::Mutex<()>,
    /// Inside a run of failed renewals (logged once at its start).
    failing: AtomicBool,
    now: WallClock,
}

impl<S: Renew> std::fmt::Debug for RenewingCredentials<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credentials themselves.
        f.debug_struct("RenewingCredentials").field("source", &self.source).finish()
    }
}

/// When credentials fetched at `now` and expiring at `expiry` are renewed.
fn renewal_time(now: SystemTime, expiry: SystemTime) -> SystemTime {
    let lifetime = expiry.duration_since(now).unwrap_or_default();
    let margin = (lifetime / 2).min(MAX_MARGIN);
    (expiry - margin).max(now + MIN_HOLD)
}

impl<S: Renew> RenewingCredentials<S> {
    pub fn new(source: S) -> Self {
        Self::with_clock(source, Arc::new(SystemTime::now))
    }

    pub fn with_clock(source: S, now: WallClock) -> Self {
        RenewingCredentials {
            source,
            held: Mutex::new(None),
            renewing: tokio::sync::Mutex::new(()),
            failing: AtomicBool::new(false),
            now,
        }
    }

    /// The credentials held, if they are not due for renewal.
    fn fresh(&self) -> Option<Arc<S::Credential>> {
        let now = (self.now)();
        let held = crate::locks::lock(&self.held);
        held.as_ref().filter(|h| h.renew_at.is_none_or(|at| now < at)).map(|h| h.credential.clone())
    }

    fn held(&self) -> Option<Arc<S::Credential>> {
        crate::locks::lock(&self.held).as_ref().map(|h| h.credential.clone())
    }

    /// Credentials for the next request: those held, renewed first when due.
    pub async fn get(&self) -> Result<Arc<S::Credential>, String> {
        if let Some(c) = self.fresh() {
            return Ok(c);
        }
        let _renewing = match self.renewing.try_lock() {
            Ok(guard) => guard,
            // Another request is renewing: go on with the old credentials meanwhile.
            Err(_) => match self.held() {
                Some(c) => return Ok(c),
                None => self.renewing.lock().await,
            },
        };
        if let Some(c) = self.fresh() {
            return Ok(c);
        }
        let first = self.held().is_none();
        match self.source.fetch().await {
            Ok((credential, expiry, from)) => {
                let now = (self.now)();
                let credential = Arc::new(credential);
                let renew_at = expiry.map(|e| renewal_time(now, e));
                *crate::locks::lock(&self.held) =
                    Some(Held { credential: credential.clone(), renew_at, expiry });
                let until = match expiry {
                    Some(e) => format!("valid until {}", httpdate::fmt_http_date(e)),
                    None => "no expiry".into(),
                };
                if first {
                    // Debug: before the mount, an INFO line would join its one-line error.
                    tracing::debug!("credentials from {from} ({until})");
                } else {
                    crate::metrics::global().credential_renewals.inc();
                    if self.failing.swap(false, Ordering::SeqCst) {
                        tracing::info!("credentials renewed again, from {from} ({until})");
                    } else {
                        tracing::debug!("credentials renewed, from {from} ({until})");
                    }
                }
                Ok(credential)
            }
            Err(why) if first => Err(why),
            Err(why) => {
                crate::metrics::global().credential_renewal_failures.inc();
                if !self.failing.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        "renewing the credentials failed, the current ones are used until the store refuses them: {why}"
                    );
                }
                let now = (self.now)();
                let mut held = crate::locks::lock(&self.held);
                let h = held.as_mut().expect("held: not the first fetch");
                // Try again in a quarter of the time left before the expiry, within bounds.
                let left = h.expiry.and_then(|e| e.duration_since(now).ok()).unwrap_or_default();
                h.renew_at = Some(now + (left / 4).clamp(MIN_RETRY, MAX_RETRY));
                Ok(h.credential.clone())
            }
        }
    }
}

#[async_trait]
impl<S: Renew> object_store::CredentialProvider for RenewingCredentials<S> {
    type Credential = S::Credential;

    async fn get_credential(&self) -> object_store::Result<Arc<S::Credential>> {
        self.get().await.map_err(|why| object_store::Error::Generic {
            store: "credentials",
            source: why.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Credentials numbered by fetch, valid `lifetime` from the test clock; fails while `fail`.
    #[derive(Debug)]
    struct Counting {
        fetches: AtomicU64,
        fail: AtomicBool,
        lifetime: Duration,
        clock: Arc<Mutex<SystemTime>>,
    }

    #[async_trait]
    impl Renew for Counting {
        type Credential = u64;
        async fn fetch(&self) -> Result<(u64, Option<SystemTime>, String), String> {
            if self.fail.load(Ordering::SeqCst) {
                return Err("the source failed".into());
            }
            let n = self.fetches.fetch_add(1, Ordering::SeqCst) + 1;
            let now = *self.clock.lock().unwrap();
            Ok((n, Some(now + self.lifetime), "test".into()))
        }
    }

    fn setup(lifetime: Duration) -> (Arc<RenewingCredentials<Counting>>, Arc<Mutex<SystemTime>>) {
        let clock = Arc::new(Mutex::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)));
        let source = Counting {
            fetches: AtomicU64::new(0),
            fail: AtomicBool::new(false),
            lifetime,
            clock: clock.clone(),
        };
        let c = clock.clone();
        let creds = RenewingCredentials::with_clock(source, Arc::new(move || *c.lock().unwrap()));
        (Arc::new(creds), clock)
    }

    fn advance(clock: &Mutex<SystemTime>, by: Duration) {
        *clock.lock().unwrap() += by;
    }

    #[test]
    fn renewal_is_some_minutes_before_the_expiry_and_half_a_short_lifetime() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let hour = Duration::from_secs(3600);
        assert_eq!(renewal_time(now, now + hour), now + hour - MAX_MARGIN);
        assert_eq!(renewal_time(now, now + Duration::from_secs(20)), now + Duration::from_secs(10));
        assert_eq!(renewal_time(now, now), now + MIN_HOLD);
    }

    #[tokio::test]
    async fn credentials_are_fetched_once_and_renewed_before_they_expire() {
        let (creds, clock) = setup(Duration::from_secs(3600));
        for _ in 0..100 {
            assert_eq!(*creds.get().await.unwrap(), 1);
        }
        advance(&clock, Duration::from_secs(3600 - 301));
        assert_eq!(*creds.get().await.unwrap(), 1, "not yet due");
        let renewals = crate::metrics::global().credential_renewals.get();
        advance(&clock, Duration::from_secs(2));
        assert_eq!(*creds.get().await.unwrap(), 2, "renewed 299 s before the expiry");
        assert!(crate::metrics::global().credential_renewals.get() > renewals);
        assert_eq!(creds.source.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_renewal_keeps_the_old_credentials_and_tries_again_later() {
        let (creds, clock) = setup(Duration::from_secs(3600));
        assert_eq!(*creds.get().await.unwrap(), 1);
        creds.source.fail.store(true, Ordering::SeqCst);
        advance(&clock, Duration::from_secs(3400));
        let failures = crate::metrics::global().credential_renewal_failures.get();
        assert_eq!(*creds.get().await.unwrap(), 1, "the old ones, still valid");
        assert!(crate::metrics::global().credential_renewal_failures.get() > failures);
        assert!(creds.failing.load(Ordering::SeqCst));
        // Not retried on every request: the next try is a while later.
        let failures = crate::metrics::global().credential_renewal_failures.get();
        assert_eq!(*creds.get().await.unwrap(), 1);
        assert_eq!(crate::metrics::global().credential_renewal_failures.get(), failures);
        // Past the expiry, still the old ones: the store decides whether they still work.
        creds.source.fail.store(false, Ordering::SeqCst);
        advance(&clock, Duration::from_secs(3600));
        assert_eq!(*creds.get().await.unwrap(), 2);
        assert!(!creds.failing.load(Ordering::SeqCst), "the run of failures ended");
    }

    #[tokio::test]
    async fn a_first_fetch_that_fails_is_an_error() {
        let (creds, _clock) = setup(Duration::from_secs(60));
        creds.source.fail.store(true, Ordering::SeqCst);
        assert_eq!(creds.get().await.unwrap_err(), "the source failed");
        creds.source.fail.store(false, Ordering::SeqCst);
        assert_eq!(*creds.get().await.unwrap(), 1);
    }
}
