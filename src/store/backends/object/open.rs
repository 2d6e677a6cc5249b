//! A backend built from a URL and the command line's options: credentials, retries,
//! timeouts, and which `-o` keys each cloud takes (secret ones never shown).

use std::sync::Arc;
use std::time::Duration;

use object_store::list::PaginatedListStore;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};

use crate::store::backends::aws_chain::{profile_settings, AwsChain};
use crate::store::backends::renewing::RenewingCredentials;
use crate::store::location::Cloud;
use crate::store::{HiddenKeys, StoreError, StoreResult};

use super::errors::{describe_url, map_err_with, strip_userinfo};
use super::read::RequestShapes;
use super::ObjectStoreBackend;

/// How to reach an object store, from the command line.
#[derive(Debug, Clone, Default)]
pub struct RemoteOptions {
    /// `--endpoint-url`: a custom endpoint (S3-compatible servers, emulators).
    pub endpoint_url: Option<String>,
    /// `--region` (S3 only).
    pub region: Option<String>,
    /// `-o key=value`, passed to the builder's `with_config` after everything else.
    pub options: Vec<(String, String)>,
    /// The rule for `http(s)://` stores whose URL data chose (reference targets): which
    /// internal hosts they, and their redirects, may reach. None: the store's own origin only.
    pub egress: Option<Arc<crate::store::egress::Egress>>,
    /// `--profile` (S3): the AWS profile to take credentials, region and endpoint from
    /// (default: `AWS_PROFILE`, else `default`).
    pub profile: Option<String>,
    /// `--no-sign-request` (S3): anonymous requests, for public buckets.
    pub no_sign_request: bool,
}

/// object_store's HTTP client for `http(s)://` stores, built by [`Egress::client_builder`]
/// (every redirect and resolved address checked; store/egress.rs) with the same timeouts
/// and no content decoding (sizes come from Content-Length).
///
/// [`Egress::client_builder`]: crate::store::egress::Egress::client_builder
#[derive(Debug)]
pub(super) struct GuardedConnector(Arc<crate::store::egress::Egress>);

impl object_store::client::HttpConnector for GuardedConnector {
    fn connect(
        &self,
        _: &object_store::ClientOptions,
    ) -> object_store::Result<object_store::client::HttpClient> {
        let client = self
            .0
            .client_builder()
            .timeout(crate::store::egress::REQUEST_TIMEOUT)
            .connect_timeout(crate::store::egress::CONNECT_TIMEOUT)
            .build()
            .map_err(|e| object_store::Error::Generic { store: "HTTP", source: Box::new(e) })?;
        Ok(object_store::client::HttpClient::new(client))
    }
}

/// The S3 credentials of a mount, as the AWS CLI finds them (see `aws_chain`).
pub(super) type AwsCredentials = Arc<RenewingCredentials<AwsChain>>;

/// Whether `-o` options give S3 credentials (or ask for none) themselves: then object_store
/// uses them as given, and the AWS chain is not consulted.
pub(super) fn s3_options_set_credentials(options: &[(String, String)]) -> bool {
    use object_store::aws::AmazonS3ConfigKey as K;
    options.iter().any(|(k, _)| {
        matches!(
            k.parse::<K>(),
            Ok(K::AccessKeyId | K::SecretAccessKey | K::Token | K::SkipSignature)
        )
    })
}

/// Bounded retries: a dead server is an error after at most ~10 s of retrying.
pub(super) fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(10),
    }
}

pub(super) const REQUEST_TIMEOUT: &str = "30s";

pub(super) const CONNECT_TIMEOUT: &str = "5s";

/// Option keys whose values are secrets (scrubbed from error text).
pub(super) fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "secret",
        "token",
        "password",
        "access_key",
        "account_key",
        "sas",
        "service_account_key",
        "client_secret",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// Check `-o` keys for `cloud` without building anything (for the CLI: one-line error, exit 2).
pub fn check_options(cloud: Cloud, options: &[(String, String)]) -> Result<(), String> {
    for (k, _) in options {
        let ok = match cloud {
            Cloud::S3 => k.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
            Cloud::Gcs => k.parse::<object_store::gcp::GoogleConfigKey>().is_ok(),
            Cloud::Azure => k.parse::<object_store::azure::AzureConfigKey>().is_ok(),
            Cloud::Http => k.parse::<ClientConfigKey>().is_ok(),
        };
        if !ok {
            return Err(format!("-o {k}: unknown option for {} stores", cloud_name(cloud)));
        }
    }
    Ok(())
}

/// Whether `key` is an option of some object store (`-o KEY=VALUE`, or an fstab `key=value`
/// that names no flag).
pub fn is_option_key(key: &str) -> bool {
    key.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok()
        || key.parse::<object_store::gcp::GoogleConfigKey>().is_ok()
        || key.parse::<object_store::azure::AzureConfigKey>().is_ok()
        || key.parse::<ClientConfigKey>().is_ok()
}

pub(super) fn cloud_name(cloud: Cloud) -> &'static str {
    match cloud {
        Cloud::S3 => "s3",
        Cloud::Gcs => "gcs",
        Cloud::Azure => "azure",
        Cloud::Http => "http",
    }
}

/// Split `scheme://bucket/some/prefix/` into (`scheme://bucket`, `some/prefix`).
pub(super) fn split_url(url: &str) -> (String, String) {
    let url = url.split(['?', '#']).next().unwrap_or("");
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.split('/').filter(|s| !s.is_empty()).collect::<Vec<_>>().join("/");
    (format!("{scheme}://{bucket}"), prefix)
}

/// What a builder yields: the store, its paginated lister (none for HTTP), a description for
/// logs and whether the store is read-only.
pub(super) type Built = (Arc<dyn ObjectStore>, Option<Arc<dyn PaginatedListStore>>, String, bool);

impl ObjectStoreBackend {
    /// Build the backend for `url` (`s3://`, `gs://`, `az://`, `http(s)://`).
    pub fn open(cloud: Cloud, url: &str, opts: &RemoteOptions) -> StoreResult<Self> {
        let (base, prefix) = split_url(url);
        let mut secrets: Vec<String> = opts
            .options
            .iter()
            .filter(|(k, v)| is_secret_key(k) && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect();
        for (k, v) in std::env::vars() {
            if (k.starts_with("AWS_") || k.starts_with("AZURE_") || k.starts_with("GOOGLE_"))
                && is_secret_key(&k)
                && v.len() >= 4
            {
                secrets.push(v);
            }
        }
        let http_endpoint =
            |e: Option<String>| e.is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"));
        let bad_key = |k: &str| StoreError::Backend {
            key: String::new(),
            message: format!("-o {k}: unknown option"),
        };
        let mut credentials = None;
        let (store, pager, description, read_only): Built = match cloud {
            Cloud::S3 => {
                use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as K};
                let mut b = AmazonS3Builder::from_env()
                    .with_url(base.clone())
                    .with_retry(retry_config())
                    .with_config(K::Client(ClientConfigKey::Timeout), REQUEST_TIMEOUT)
                    .with_config(K::Client(ClientConfigKey::ConnectTimeout), CONNECT_TIMEOUT);
                if let Some(e) = &opts.endpoint_url {
                    b = b.with_endpoint(e.clone());
                }
                if let Some(r) = &opts.region {
                    b = b.with_region(r.clone());
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let anonymous = opts.no_sign_request
                    || b.get_config_value(&K::SkipSignature)
                        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                if anonymous {
                    b = b.with_skip_signature(true);
                }
                // What the flags, -o and the environment leave open comes from the AWS
                // profile, as the CLI has it.
                let profile = profile_settings(opts.profile.as_deref());
                let endpoint_set = b.get_config_value(&K::Endpoint).is_some()
                    || b.get_config_value(&K::S3Endpoint).is_some();
                if let (false, Some(e)) = (endpoint_set, profile.endpoint_url) {
                    b = b.with_endpoint(e);
                }
                if let (None, Some(r)) = (b.get_config_value(&K::Region), profile.region) {
                    b = b.with_region(r);
                }
                if http_endpoint(b.get_config_value(&K::Endpoint))
                    || http_endpoint(b.get_config_value(&K::S3Endpoint))
                {
                    b = b.with_allow_http(true);
                }
                if !anonymous && !s3_options_set_credentials(&opts.options) {
                    let region =
                        b.get_config_value(&K::Region).unwrap_or_else(|| "us-east-1".into());
                    let chain = AwsChain::new(opts.profile.as_deref(), &region);
                    let provider = Arc::new(RenewingCredentials::new(chain));
                    credentials = Some(provider.clone());
                    b = b.with_credentials(provider);
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                (s.clone(), Some(s), describe_url(&base, &prefix), false)
            }
            Cloud::Gcs => {
                use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey as K};
                let mut b = GoogleCloudStorageBuilder::from_env()
                    .with_url(base.clone())
                    .with_retry(retry_config())
                    .with_config(K::Client(ClientConfigKey::Timeout), REQUEST_TIMEOUT)
                    .with_config(K::Client(ClientConfigKey::ConnectTimeout), CONNECT_TIMEOUT);
                if let Some(e) = &opts.endpoint_url {
                    b = b.with_config(K::BaseUrl, e.clone());
                    if http_endpoint(Some(e.clone())) {
                        b = b.with_config(K::Client(ClientConfigKey::AllowHttp), "true");
                    }
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                (s.clone(), Some(s), describe_url(&base, &prefix), false)
            }
            Cloud::Azure => {
                use object_store::azure::{AzureConfigKey as K, MicrosoftAzureBuilder};
                let mut b = MicrosoftAzureBuilder::from_env()
                    .with_url(url.split(['?', '#']).next().unwrap_or(url))
                    .with_retry(retry_config())
                    .with_config(K::Client(ClientConfigKey::Timeout), REQUEST_TIMEOUT)
                    .with_config(K::Client(ClientConfigKey::ConnectTimeout), CONNECT_TIMEOUT);
                if let Some(e) = &opts.endpoint_url {
                    b = b.with_endpoint(e.clone());
                    if http_endpoint(Some(e.clone())) {
                        b = b.with_allow_http(true);
                    }
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                (s.clone(), Some(s), describe_url(&base, &prefix), false)
            }
            Cloud::Http => {
                let clean =
                    url.split(['?', '#']).next().unwrap_or(url).trim_end_matches('/').to_string();
                let egress = opts.egress.clone().unwrap_or_else(|| {
                    let own = Some(clean.clone());
                    Arc::new(crate::store::egress::Egress { authorized: Vec::new(), own })
                });
                let mut b = object_store::http::HttpBuilder::new()
                    .with_url(clean.clone())
                    .with_http_connector(GuardedConnector(egress.clone()))
                    .with_retry(retry_config())
                    .with_config(ClientConfigKey::Timeout, REQUEST_TIMEOUT)
                    .with_config(ClientConfigKey::ConnectTimeout, CONNECT_TIMEOUT);
                if clean.to_ascii_lowercase().starts_with("http://") {
                    b = b.with_config(ClientConfigKey::AllowHttp, "true");
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                // The whole URL is the base; keys are relative to it.
                let desc = strip_userinfo(&clean);
                return Ok(ObjectStoreBackend {
                    store: s,
                    pager: None,
                    prefix: String::new(),
                    description: desc,
                    read_only: true,
                    secrets,
                    hidden: HiddenKeys::default(),
                    update_by_generation: false,
                    shapes: RequestShapes::default(),
                    credentials: None,
                    egress: Some(egress),
                });
            }
        };
        Ok(ObjectStoreBackend {
            store,
            pager,
            prefix,
            description,
            read_only,
            secrets,
            hidden: HiddenKeys::default(),
            update_by_generation: cloud == Cloud::Gcs,
            shapes: RequestShapes::default(),
            credentials,
            egress: None,
        })
    }
}
