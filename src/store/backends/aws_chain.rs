//! AWS credentials, region and endpoint found the way the AWS CLI finds them, through the
//! official `aws-config` providers: environment, the profile (`--profile`, `AWS_PROFILE`; its
//! static keys, SSO, `credential_process`, `role_arn` with `source_profile` or
//! `credential_source`, web identity), web identity from the environment (EKS IRSA), container
//! credentials (ECS, EKS Pod Identity) and the instance metadata service (IMDSv2), in that
//! order. The chain is run here link by link rather than through `DefaultCredentialsChain`, so
//! that a failure names every source tried and why each gave nothing, on one line.

use std::borrow::Cow;
use std::time::SystemTime;

use async_trait::async_trait;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_types::os_shim_internal::{Env, Fs};
use object_store::aws::AwsCredential;

use crate::store::backends::renewing::Renew;
use crate::store::error_chain;

/// What the selected profile of the shared config files says for S3, besides credentials.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProfileSettings {
    /// `region`.
    pub region: Option<String>,
    /// `endpoint_url`, or `endpoint_url` of the profile's `services` section for S3, or
    /// `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, as the CLI reads them.
    pub endpoint_url: Option<String>,
}

/// Read the region and S3 endpoint of `profile` (else `AWS_PROFILE`, else `default`) from the
/// shared config files (`AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`). Missing files give
/// nothing; a named profile that is missing is reported by the credential chain, not here.
pub fn profile_settings(profile: Option<&str>) -> ProfileSettings {
    let env = Env::real();
    let files = Default::default();
    let chosen = profile.map(|p| Cow::Owned(p.to_string()));
    // The files are read with std::fs inside this future: it completes on its first poll.
    let sections =
        futures::executor::block_on(aws_config::profile::load(&Fs::real(), &env, &files, chosen))
            .ok();
    let ignore_endpoints = env
        .get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
        .is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || sections.as_ref().and_then(|s| s.get("ignore_configured_endpoint_urls")) == Some("true");
    let endpoint_url = if ignore_endpoints {
        None
    } else {
        aws_runtime::env_config::EnvConfigValue::new()
            .env("AWS_ENDPOINT_URL")
            .profile("endpoint_url")
            .service_id("S3")
            .load(&env, sections.as_ref())
            .map(|(v, _)| v.into_owned())
    };
    let region = sections.as_ref().and_then(|s| s.get("region")).map(str::to_string);
    ProfileSettings { region, endpoint_url }
}

/// One source of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Link {
    Environment,
    Profile(String),
    WebIdentity,
    Container,
    Imds,
}

/// The AWS CLI's chain of credential sources for one mount.
pub struct AwsChain {
    /// `--profile`, if given (else the provider reads `AWS_PROFILE`).
    profile: Option<String>,
    /// The profile's name for messages.
    profile_name: String,
    conf: ProviderConfig,
}

impl std::fmt::Debug for AwsChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsChain").field("profile", &self.profile_name).finish()
    }
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// `AWS_CONFIG_FILE` or `~/.aws/config`, and the credentials file likewise, as users know them.
fn shared_files() -> (String, String) {
    let file = |var: &str, default: &str| {
        std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
    };
    (
        file("AWS_CONFIG_FILE", "~/.aws/config"),
        file("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
    )
}

fn describe(link: &Link) -> String {
    match link {
        Link::Environment => "environment".into(),
        Link::Profile(p) => format!("profile `{p}`"),
        Link::WebIdentity => "web identity".into(),
        Link::Container => "container credentials".into(),
        Link::Imds => "IMDS".into(),
    }
}

impl AwsChain {
    /// The chain for `profile` (else `AWS_PROFILE`, else `default`); `region` is the one STS
    /// (AssumeRole, web identity) and SSO are asked in. Nothing is read or sent until the
    /// first `credentials()`.
    pub fn new(profile: Option<&str>, region: &str) -> AwsChain {
        let conf = ProviderConfig::default()
            .with_region(Some(aws_config::Region::new(region.to_string())));
        let profile_name = profile
            .map(str::to_string)
            .or_else(|| std::env::var("AWS_PROFILE").ok().filter(|p| !p.is_empty()))
            .unwrap_or_else(|| "default".to_string());
        AwsChain { profile: profile.map(str::to_string), profile_name, conf }
    }

    /// The sources, built anew for each search: a provider that failed to start keeps that
    /// failure for good ("initialization error already taken"), and a renewal should see the
    /// config files as they are now, as the CLI does.
    fn links(&self) -> Vec<(Link, SharedCredentialsProvider)> {
        use aws_config::{ecs, imds, profile, web_identity_token};
        let conf = &self.conf;
        let mut profile_builder =
            profile::ProfileFileCredentialsProvider::builder().configure(conf);
        if let Some(p) = &self.profile {
            profile_builder = profile_builder.profile_name(p);
        }
        let mut links = vec![
            (
                Link::Environment,
                SharedCredentialsProvider::new(
                    aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
                ),
            ),
            (
                Link::Profile(self.profile_name.clone()),
                SharedCredentialsProvider::new(profile_builder.build()),
            ),
        ];
        // Sources that need configuring are tried (and named) only where configured.
        if env_set("AWS_WEB_IDENTITY_TOKEN_FILE") {
            let p = web_identity_token::WebIdentityTokenCredentialsProvider::builder()
                .configure(conf)
                .build();
            links.push((Link::WebIdentity, SharedCredentialsProvider::new(p)));
        }
        if env_set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
            || env_set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        {
            let p = ecs::EcsCredentialsProvider::builder().configure(conf).build();
            links.push((Link::Container, SharedCredentialsProvider::new(p)));
        }
        let imds = imds::credentials::ImdsCredentialsProvider::builder().configure(conf).build();
        links.push((Link::Imds, SharedCredentialsProvider::new(imds)));
        links
    }

    /// The first source that has credentials, as the CLI takes them: a source with nothing
    /// configured passes to the next; one that is configured but fails (a failing
    /// `credential_process`, a refused AssumeRole) ends the search. `Err` is one line naming
    /// each source tried and what it gave, without secrets.
    pub async fn credentials(&self) -> Result<(aws_credential_types::Credentials, String), String> {
        let mut tried = Vec::new();
        for (link, provider) in &self.links() {
            match provider.provide_credentials().await {
                Ok(c) => return Ok((c, describe(link))),
                Err(e @ CredentialsError::CredentialsNotLoaded(_)) => {
                    tried.push(with_reason(link, not_loaded_reason(link, &error_chain(&e))));
                }
                Err(e) => {
                    tried.push(with_reason(link, Some(failure_reason(&e))));
                    break;
                }
            }
        }
        Err(format!("no credentials: tried {}", tried.join(", ")))
    }
}

fn with_reason(link: &Link, reason: Option<String>) -> String {
    match reason {
        Some(r) => format!("{} ({r})", describe(link)),
        None => describe(link),
    }
}

/// Why a source had nothing, in a few words (None: nothing worth saying, e.g. no variables).
fn not_loaded_reason(link: &Link, detail: &str) -> Option<String> {
    let (config, credentials) = shared_files();
    match link {
        Link::Environment => None,
        Link::Profile(_) if detail.contains("was not defined") => {
            Some(format!("no such profile in {config} or {credentials}"))
        }
        Link::Profile(_) if detail.contains("sso_account_id") => {
            Some("an SSO profile without sso_account_id and sso_role_name".into())
        }
        Link::Profile(p) if p == "default" => Some(format!("nothing in {config} or {credentials}")),
        Link::Profile(_) => Some("no credentials in it".into()),
        Link::Imds if detail.contains("disabled") => {
            Some("disabled by AWS_EC2_METADATA_DISABLED".into())
        }
        Link::Imds if detail.contains("404") => Some("no IAM role attached".into()),
        Link::Imds => Some("unreachable".into()),
        Link::WebIdentity | Link::Container => Some(one_line(detail)),
    }
}

/// A configured source that failed: its own error, shortened to one line.
fn failure_reason(e: &CredentialsError) -> String {
    let detail = error_chain(e);
    let detail = detail
        .strip_prefix("an error occurred while loading credentials: ")
        .or_else(|| detail.strip_prefix("unexpected credentials error: "))
        .unwrap_or(&detail);
    one_line(detail)
}

/// Newlines (a process's stderr) folded into one line, and at most a few hundred characters.
fn one_line(s: &str) -> String {
    let folded = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match folded.char_indices().nth(300) {
        Some((cut, _)) => format!("{}...", &folded[..cut]),
        None => folded,
    }
}

#[async_trait]
impl Renew for AwsChain {
    type Credential = AwsCredential;

    async fn fetch(&self) -> Result<(AwsCredential, Option<SystemTime>, String), String> {
        let (c, from) = self.credentials().await?;
        let credential = AwsCredential {
            key_id: c.access_key_id().to_string(),
            secret_key: c.secret_access_key().to_string(),
            token: c.session_token().map(str::to_string),
        };
        Ok((credential, c.expiry(), from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_say_what_each_source_lacked() {
        let missing = "profile `myprof` was not defined: could not find source profile";
        let r = not_loaded_reason(&Link::Profile("myprof".into()), missing).unwrap();
        assert!(r.starts_with("no such profile in "), "{r}");
        assert_eq!(
            not_loaded_reason(
                &Link::Imds,
                "IMDS disabled by AWS_EC2_METADATA_DISABLED env var set to `true`"
            ),
            Some("disabled by AWS_EC2_METADATA_DISABLED".into())
        );
        assert_eq!(
            not_loaded_reason(&Link::Imds, "could not communicate with IMDS: dispatch failure"),
            Some("unreachable".into())
        );
        assert_eq!(not_loaded_reason(&Link::Environment, "environment variable not set"), None);
    }

    #[test]
    fn one_line_folds_and_bounds() {
        assert_eq!(one_line("a\nb  c\n"), "a b c");
        let long = "x".repeat(1000);
        assert_eq!(one_line(&long).len(), 303);
    }
}
