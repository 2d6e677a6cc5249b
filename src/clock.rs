//! The clock that deadlines read: metadata TTLs and the age of cached answers.
//!
//! It is tokio's clock, so a unit test on a paused runtime moves it with `tokio::time::advance`
//! instead of sleeping, plus an offset that only a test moves: a daemon started with
//! `ZM_TEST_CLOCK_STEP=SECS` in its environment advances it by SECS on each SIGUSR2 and logs
//! `test clock advanced` when done, so an integration test can step past a TTL and wait for
//! that event; `ZM_TEST_CLOCK_OFFSET=SECS` starts it advanced (a remount that finds its disk
//! cache journal older than the TTL). Timing of requests (metrics, logs) keeps the real clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds the test hook has added.
static OFFSET_MS: AtomicU64 = AtomicU64::new(0);

fn offset() -> Duration {
    Duration::from_millis(OFFSET_MS.load(Ordering::Relaxed))
}

/// Now, for comparing with instants this clock returned before.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std() + offset()
}

/// How long ago `at` (an instant of this clock) was.
pub fn since(at: Instant) -> Duration {
    now().saturating_duration_since(at)
}

/// The wall clock, advancing with [`now`] (so with a paused runtime and the test offset too),
/// for ages that outlive the process (the disk cache's journal).
pub fn system_now() -> SystemTime {
    static BASE: OnceLock<(SystemTime, Instant)> = OnceLock::new();
    let (wall, at) = *BASE.get_or_init(|| (SystemTime::now(), Instant::now()));
    let now = now();
    match now.checked_duration_since(at) {
        Some(ahead) => wall + ahead,
        None => wall - at.duration_since(now),
    }
}

/// [`system_now`] in milliseconds since the Unix epoch.
pub fn unix_millis() -> u64 {
    system_now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

fn advance(by: Duration) {
    OFFSET_MS.fetch_add(by.as_millis() as u64, Ordering::Relaxed);
}

/// Seconds from an environment variable, if set (a bad value is an error naming it).
fn env_secs(name: &str) -> Result<Option<Duration>, String> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Some(Duration::from_secs_f64(s)))
            .ok_or_else(|| format!("{name}={v:?} is not a number of seconds")),
    }
}

/// The test hook, from the environment (see the module doc); nothing when neither variable is
/// set. Must run inside the daemon's runtime.
pub fn install_test_hook() -> Result<(), String> {
    if let Some(start) = env_secs("ZM_TEST_CLOCK_OFFSET")? {
        advance(start);
    }
    let Some(step) = env_secs("ZM_TEST_CLOCK_STEP")? else { return Ok(()) };
    use tokio::signal::unix::{signal, SignalKind};
    let mut usr2 = signal(SignalKind::user_defined2()).map_err(|e| format!("SIGUSR2: {e}"))?;
    tokio::spawn(async move {
        while usr2.recv().await.is_some() {
            advance(step);
            tracing::info!(by = ?step, total = ?offset(), "test clock advanced");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_the_paused_runtime() {
        let before = now();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(now() - before, Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn the_wall_clock_follows_too() {
        let before = system_now();
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(system_now().duration_since(before).unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn bad_environment_values_are_named() {
        // A name no other test sets, so the process-wide environment is not shared.
        std::env::set_var("ZM_TEST_CLOCK_PARSE_CHECK", "soon");
        let e = env_secs("ZM_TEST_CLOCK_PARSE_CHECK").unwrap_err();
        assert!(e.contains("ZM_TEST_CLOCK_PARSE_CHECK") && e.contains("soon"), "{e}");
        std::env::set_var("ZM_TEST_CLOCK_PARSE_CHECK", "1.5");
        assert_eq!(
            env_secs("ZM_TEST_CLOCK_PARSE_CHECK").unwrap(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(env_secs("ZM_TEST_CLOCK_UNSET_NAME").unwrap(), None);
    }
}
