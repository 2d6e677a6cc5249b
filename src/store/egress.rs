//! Which hosts data may make the mount fetch from. A kerchunk reference names the URLs of its
//! targets, an Icechunk repository the URL prefixes of its virtual chunk containers: both are
//! data from somewhere else. Without a rule, a reference to `http://169.254.169.254/latest/...`
//! would show a cloud instance's metadata (credentials included) as a chunk file, and one to
//! `http://127.0.0.1:PORT/` whatever a local service answers. So an `http(s)://` URL that the
//! data chose is refused when its host is loopback, private, link-local, unspecified or
//! otherwise not globally routable (by address, by name such as `localhost`, or by what the
//! name resolves to), unless the user authorized its prefix or it is on the same origin as
//! the mount's own SOURCE (which the user chose).
//!
//! Every hop is held to the rule, not only the first URL: the HTTP clients of such fetches
//! ([`Egress::client_builder`]) check each redirect's URL as they check the first, and resolve
//! names through a resolver that refuses internal addresses and hands the connector exactly
//! the addresses it checked (a name that answers a public address to the check and an
//! internal one to the connect, DNS rebinding, is caught at the connect).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

/// Why `ip` is not a public address, if it is not.
pub fn internal_ip(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_v4(v4),
            None => internal_v6(v6),
        },
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_private() {
        Some("a private address")
    } else if ip.is_link_local() {
        Some("a link-local address (cloud instance metadata lives there)")
    } else if ip.is_unspecified() || a == 0 {
        Some("an unspecified address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared (carrier-grade NAT) address")
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        Some("a broadcast, multicast or reserved address")
    } else {
        None
    }
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private (unique local) address")
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else {
        None
    }
}

/// The host (without brackets) and port of an `http(s)://` URL; None for other schemes.
pub fn http_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = after.strip_prefix(':').map_or(Some(default_port), |p| p.parse().ok())?;
        return Some((host.to_string(), port));
    }
    match hostport.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), port.parse().ok()?)),
        None => Some((hostport.to_string(), default_port)),
    }
}

/// `scheme://host:port` of an `http(s)://` URL, lower-cased, the port always written.
fn origin(url: &str) -> Option<String> {
    let scheme = url.split_once("://")?.0.to_ascii_lowercase();
    let (host, port) = http_host_port(url)?;
    Some(format!("{scheme}://{}:{port}", host.to_ascii_lowercase()))
}

/// Why `host` (as written in a URL) is internal, without resolving it.
fn internal_by_name(host: &str) -> Option<&'static str> {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    if let Ok(ip) = h.parse::<IpAddr>() {
        return internal_ip(ip);
    }
    if h == "localhost" || h.ends_with(".localhost") {
        return Some("a loopback name");
    }
    None
}

/// The addresses `host` resolves to (none if it does not). Resolving blocks: on a
/// multi-threaded tokio runtime the worker hands its other tasks on meanwhile; this runs once
/// per target store.
fn resolve(host: &str, port: u16) -> Vec<IpAddr> {
    let lookup =
        || (host, port).to_socket_addrs().map(|a| a.map(|a| a.ip()).collect()).unwrap_or_default();
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(lookup)
        }
        _ => lookup(),
    }
}

/// May data make the mount fetch from `url`? `authorized`: the URL prefixes the user allowed
/// (`all` for every one); `own`: the mount's own SOURCE URL, whose origin is always allowed.
/// The error is one line that says how to allow it.
pub fn check_http_target(
    url: &str,
    authorized: &[String],
    own: Option<&str>,
) -> Result<(), String> {
    check_with(url, authorized, own, resolve)
}

fn check_with(
    url: &str,
    authorized: &[String],
    own: Option<&str>,
    resolve: impl Fn(&str, u16) -> Vec<IpAddr>,
) -> Result<(), String> {
    let Some((host, port)) = http_host_port(url) else { return Ok(()) };
    // `http://h:p` (a target store's root, as reference targets are opened) is under the
    // prefix `http://h:p/`.
    let slashed = format!("{}/", url.trim_end_matches('/'));
    let listed = authorized
        .iter()
        .any(|a| a == "all" || url.starts_with(a.as_str()) || slashed.starts_with(a.as_str()));
    let same_origin = own.and_then(origin).is_some_and(|o| Some(o) == origin(url));
    if listed || same_origin {
        return Ok(());
    }
    let why = match internal_by_name(&host) {
        Some(why) => Some(why.to_string()),
        None if host.parse::<IpAddr>().is_ok() => None,
        None => resolve(&host, port)
            .into_iter()
            .find_map(|ip| internal_ip(ip).map(|why| format!("{why} ({ip})"))),
    };
    match why {
        None => Ok(()),
        Some(why) => Err(format!(
            "{url}: host {host} is {why}; data may not make the mount fetch from it unless \
             authorized: --authorize-virtual {}",
            origin(url).map(|o| o + "/").unwrap_or_else(|| url.to_string())
        )),
    }
}

/// The rule for one store's data-chosen HTTP fetches: the URL prefixes the user authorized
/// (`--authorize-virtual`) and the origin the user chose (the mount's SOURCE).
#[derive(Debug, Clone, Default)]
pub struct Egress {
    pub authorized: Vec<String>,
    pub own: Option<String>,
}

/// Redirects followed at most (reqwest's own default).
const MAX_REDIRECTS: usize = 10;

/// The timeouts of the clients built from [`Egress::client_builder`]: those the object-store
/// backend gives object_store (`REQUEST_TIMEOUT`, `CONNECT_TIMEOUT` in backends/object/open.rs).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Egress {
    /// May a fetch go to `url`? (see [`check_http_target`]).
    pub fn check(&self, url: &str) -> Result<(), String> {
        check_http_target(url, &self.authorized, self.own.as_deref())
    }

    /// The same check without resolving the name (the resolver judges the addresses).
    fn check_unresolved(&self, url: &str) -> Result<(), String> {
        check_with(url, &self.authorized, self.own.as_deref(), |_, _| Vec::new())
    }

    /// May `host` resolve to internal addresses? The hosts of the authorized prefixes and of
    /// the own origin (their ports and paths are checked on the URL).
    fn trusts_host(&self, host: &str) -> bool {
        let same =
            |url: &str| http_host_port(url).is_some_and(|(h, _)| h.eq_ignore_ascii_case(host));
        self.authorized.iter().any(|a| a == "all" || same(a))
            || self.own.as_deref().is_some_and(same)
    }

    /// A reqwest client builder whose redirects and name resolutions obey this rule.
    pub fn client_builder(self: &Arc<Self>) -> reqwest::ClientBuilder {
        self.client_builder_with(Arc::new(system_lookup))
    }

    fn client_builder_with(self: &Arc<Self>, lookup: Arc<Lookup>) -> reqwest::ClientBuilder {
        let resolver = GuardedResolver { egress: self.clone(), lookup };
        let egress = self.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match egress.check_unresolved(attempt.url().as_str()) {
                Ok(()) => attempt.follow(),
                Err(why) => {
                    tracing::warn!("redirect not followed (EIO): {why}");
                    attempt.error(why)
                }
            }
        });
        reqwest::Client::builder().dns_resolver(Arc::new(resolver)).redirect(policy)
    }
}

/// Name -> addresses (the system's resolver; tests give their own).
type Lookup = dyn Fn(&str) -> std::io::Result<Vec<IpAddr>> + Send + Sync;

fn system_lookup(host: &str) -> std::io::Result<Vec<IpAddr>> {
    Ok((host, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
}

/// Resolves a name once, refuses it when an address is internal (unless its host is trusted),
/// and returns exactly the addresses it checked: they are the ones connected to.
struct GuardedResolver {
    egress: Arc<Egress>,
    lookup: Arc<Lookup>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (egress, lookup) = (self.egress.clone(), self.lookup.clone());
        let host = name.as_str().to_string();
        Box::pin(async move {
            let h = host.clone();
            let ips = tokio::task::spawn_blocking(move || lookup(&h)).await??;
            if !egress.trusts_host(&host) {
                let internal = ips.iter().find_map(|ip| internal_ip(*ip).map(|why| (ip, why)));
                if let Some((ip, why)) = internal {
                    let msg = format!(
                        "host {host} resolves to {why} ({ip}); data may not make the mount \
                         fetch from it unless authorized: --authorize-virtual http://{host}:PORT/"
                    );
                    tracing::warn!("not connected (EIO): {msg}");
                    return Err(msg.into());
                }
            }
            let addrs: reqwest::dns::Addrs =
                Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_named_and_public_ones_pass() {
        for (ip, internal) in [
            ("127.0.0.1", true),
            ("10.1.2.3", true),
            ("172.16.0.1", true),
            ("172.32.0.1", false),
            ("192.168.1.1", true),
            ("169.254.169.254", true),
            ("0.0.0.0", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("255.255.255.255", true),
            ("8.8.8.8", false),
            ("52.216.1.1", false),
            ("::1", true),
            ("::", true),
            ("fd00::1", true),
            ("fe80::1", true),
            ("::ffff:169.254.169.254", true),
            ("::ffff:8.8.8.8", false),
            ("2600:1f18::1", false),
        ] {
            let got = internal_ip(ip.parse().unwrap()).is_some();
            assert_eq!(got, internal, "{ip}");
        }
    }

    #[test]
    fn hosts_and_ports_come_out_of_urls() {
        let hp = |u| http_host_port(u);
        assert_eq!(hp("http://h/a"), Some(("h".into(), 80)));
        assert_eq!(hp("https://h:8443/a?x"), Some(("h".into(), 8443)));
        assert_eq!(hp("http://u:p@169.254.169.254/x"), Some(("169.254.169.254".into(), 80)));
        assert_eq!(hp("http://[::1]:9000/x"), Some(("::1".into(), 9000)));
        assert_eq!(hp("https://[fe80::1]/x"), Some(("fe80::1".into(), 443)));
        assert_eq!(hp("s3://bucket/key"), None);
        assert_eq!(hp("http://h:notaport/"), None);
    }

    #[test]
    fn data_may_not_point_the_mount_at_internal_hosts_unless_allowed() {
        let meta = "http://169.254.169.254/latest/meta-data/iam";
        let err = check_http_target(meta, &[], None).unwrap_err();
        assert!(err.contains("link-local") && err.contains("--authorize-virtual"), "{err}");
        assert!(check_http_target("http://127.0.0.1:8080/f.nc", &[], None).is_err());
        assert!(check_http_target("http://LOCALHOST./f.nc", &[], None).is_err());
        assert!(check_http_target("http://a.localhost/f.nc", &[], None).is_err());
        assert!(check_http_target("http://[::1]/f.nc", &[], None).is_err());
        // The user's own prefix or origin, or `all`, allows it.
        let allow = ["http://127.0.0.1:8080/".to_string()];
        assert!(check_http_target("http://127.0.0.1:8080/f.nc", &allow, None).is_ok());
        assert!(check_http_target("http://127.0.0.1:8081/f.nc", &allow, None).is_err());
        assert!(check_http_target("http://127.0.0.1:8080", &allow, None).is_ok());
        assert!(check_http_target("http://127.0.0.1:80", &allow, None).is_err());
        assert!(check_http_target(meta, &["all".into()], None).is_ok());
        let own = Some("HTTP://127.0.0.1:8080/refs/kerchunk.json");
        assert!(check_http_target("http://127.0.0.1:8080/data/f.nc", &[], own).is_ok());
        assert!(check_http_target("http://127.0.0.1:9/data/f.nc", &[], own).is_err());
        assert!(check_http_target("http://127.0.0.1:80/x", &[], Some("http://127.0.0.1/r")).is_ok());
        // Public addresses and other schemes are not this rule's business.
        assert!(check_http_target("https://8.8.8.8/f.nc", &[], None).is_ok());
        assert!(check_http_target("s3://bucket/f.nc", &[], None).is_ok());
    }

    #[test]
    fn a_name_is_judged_by_every_address_it_resolves_to() {
        let resolver = |host: &str, port: u16| -> Vec<IpAddr> {
            assert_eq!(port, 80);
            match host {
                // metadata.google.internal is 169.254.169.254 on GCP.
                "metadata.google.internal" => vec!["169.254.169.254".parse().unwrap()],
                "mixed.example" => vec!["8.8.8.8".parse().unwrap(), "10.0.0.7".parse().unwrap()],
                "public.example" => vec!["8.8.8.8".parse().unwrap()],
                _ => vec![],
            }
        };
        let err = check_with("http://metadata.google.internal/x", &[], None, resolver).unwrap_err();
        assert!(err.contains("link-local") && err.contains("169.254.169.254"), "{err}");
        let err = check_with("http://mixed.example/x", &[], None, resolver).unwrap_err();
        assert!(err.contains("private") && err.contains("10.0.0.7"), "{err}");
        assert!(check_with("http://public.example/x", &[], None, resolver).is_ok());
        // No answer: not refused here (the fetch itself fails later, with EIO).
        assert!(check_with("http://nowhere.example/x", &[], None, resolver).is_ok());
        // The real resolver knows `localhost` through /etc/hosts.
        assert!(resolve("localhost", 80).iter().all(|ip| internal_ip(*ip).is_some()));
    }

    /// A server on 127.0.0.1 answering every request with `answer` (`{PORT}` replaced by
    /// `port_in_answer`); it counts the connections it accepts.
    async fn server(
        answer: &'static str,
        port_in_answer: u16,
    ) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        let answer = answer.replace("{PORT}", &port_in_answer.to_string());
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else { return };
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = sock.write_all(answer.as_bytes()).await;
            }
        });
        (port, count)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    const TO_B: &str = "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{PORT}/latest/meta-data/creds\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

    fn client(egress: Egress, lookup: Option<Arc<Lookup>>) -> reqwest::Client {
        let egress = Arc::new(egress);
        let b = match lookup {
            Some(l) => egress.client_builder_with(l),
            None => egress.client_builder(),
        };
        b.no_proxy().build().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_redirect_is_checked_like_the_first_url() {
        let (b, b_count) = server(OK, 0).await;
        let (a, _) = server(TO_B, b).await;
        let own = Some(format!("http://127.0.0.1:{a}/refs.json"));
        let url = format!("http://127.0.0.1:{a}/data.bin");
        // A's own origin is allowed; its redirect to B is not: B is never contacted.
        let e = Egress { authorized: vec![], own: own.clone() };
        assert!(e.check(&url).is_ok());
        let err = client(e, None).get(&url).send().await.unwrap_err();
        assert!(err.is_redirect(), "{err:?}");
        assert_eq!(b_count.load(std::sync::atomic::Ordering::SeqCst), 0, "B was contacted");
        // B authorized: the redirect is followed.
        let e = Egress { authorized: vec![format!("http://127.0.0.1:{b}/latest/")], own };
        let r = client(e, None).get(&url).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "ok");
        assert_eq!(b_count.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_address_checked_is_the_address_connected_to() {
        let (port, count) = server(OK, 0).await;
        // The check's resolution said public; the connect's says loopback (DNS rebinding).
        let rebinding: Arc<Lookup> = Arc::new(|host: &str| {
            assert_eq!(host, "rebind.test");
            Ok(vec!["127.0.0.1".parse().unwrap()])
        });
        let url = format!("http://rebind.test:{port}/x");
        let err = client(Egress::default(), Some(rebinding.clone())).get(&url).send().await;
        let err = err.unwrap_err();
        assert!(err.is_connect(), "{err:?}");
        assert!(format!("{err:?}").contains("loopback"), "{err:?}");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 0, "connected anyway");
        // Its host authorized: the same resolver's answer is used, and connected to.
        let e = Egress { authorized: vec![format!("http://rebind.test:{port}/")], own: None };
        let r = client(e, Some(rebinding)).get(&url).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "ok");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
