//! The "Source" section: how to reach the store (object-store endpoint, region, credentials,
//! builder options) and which Icechunk ref to show.

use crate::source::{Location, Source};
use crate::store::backends::icechunk::RefSpec;
use crate::store::backends::object::RemoteOptions;
use crate::store::location::Cloud;

use super::{usage, values, UsageError};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Source")]
pub struct SourceFlags {
    /// Custom object-store endpoint, e.g. http://127.0.0.1:9000 for an S3-compatible server
    /// (default: from the environment, e.g. AWS_ENDPOINT_URL, else the provider's).
    #[arg(long, value_name = "URL", value_parser = values::endpoint_url)]
    pub endpoint_url: Option<String>,
    /// Region of an S3 bucket (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// AWS profile for an s3:// source: its credentials (keys, SSO, credential_process,
    /// role_arn), region and endpoint_url from ~/.aws/config and ~/.aws/credentials
    /// (default: AWS_PROFILE, else `default`). See docs/SOURCES.md "Credentials".
    #[arg(long, value_name = "NAME", value_parser = values::profile)]
    pub profile: Option<String>,
    /// Send unsigned requests to an s3:// source, looking for no credentials (public buckets).
    #[arg(long)]
    pub no_sign_request: bool,
    /// An object_store builder option, e.g. -o aws_virtual_hosted_style_request=true (repeatable).
    #[arg(short = 'o', long = "option", value_name = "KEY=VALUE", value_parser = values::KeyValue)]
    pub options: Vec<(String, String)>,
    /// The branch, tag or snapshot id to show (`branch:NAME`, `tag:NAME`, `snapshot:ID` to be
    /// explicit; a bare name is tried as a branch, a tag, then a snapshot id). Default: branch
    /// main. A branch is followed: its new commits show up after --metadata-ttl.
    #[arg(long = "ref", value_name = "REF", value_parser = |s: &str| RefSpec::parse(Some(s)))]
    pub icechunk_ref: Option<RefSpec>,
}

impl SourceFlags {
    /// How to reach `source`'s store; refuses what does not apply to it.
    pub(super) fn remote(self, source: &Source) -> Result<RemoteOptions, UsageError> {
        if !matches!(source, Source::Icechunk(_)) && self.icechunk_ref.is_some() {
            return Err(usage("--ref applies only to Icechunk sources"));
        }
        match source.location() {
            Location::Remote { cloud, .. } => {
                crate::store::backends::object::check_options(*cloud, &self.options)
                    .map_err(usage)?
            }
            // A local reference set may point into object stores: the options are for those.
            Location::Local(_) if matches!(source, Source::Reference(_)) => {}
            Location::Local(_) => {
                if self.endpoint_url.is_some() || self.region.is_some() || !self.options.is_empty()
                {
                    return Err(usage("--endpoint-url, --region and -o apply only to object-store sources (s3://, gs://, az://, http(s)://)"));
                }
            }
        }
        check_s3_credentials(source, self.profile.is_some(), self.no_sign_request)?;
        Ok(RemoteOptions {
            endpoint_url: self.endpoint_url,
            region: self.region,
            options: self.options,
            profile: self.profile,
            no_sign_request: self.no_sign_request,
            egress: None,
        })
    }

    /// `--ref`, or branch main.
    pub(super) fn icechunk_ref(&self) -> RefSpec {
        self.icechunk_ref.clone().unwrap_or_else(|| RefSpec::Branch("main".into()))
    }
}

/// `--profile` and `--no-sign-request`: for S3 sources (or references that may point into
/// S3), not both.
fn check_s3_credentials(
    source: &Source,
    profile: bool,
    no_sign_request: bool,
) -> Result<(), UsageError> {
    if !profile && !no_sign_request {
        return Ok(());
    }
    let s3 = matches!(source.location(), Location::Remote { cloud: Cloud::S3, .. })
        || matches!(source, Source::Reference(_));
    if !s3 {
        return Err(usage("--profile and --no-sign-request apply only to s3:// sources"));
    }
    if profile && matches!(source, Source::Icechunk(_)) {
        // icechunk's own S3 client takes AWS_* variables only.
        return Err(usage("--profile does not apply to Icechunk sources (their S3 client reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment)"));
    }
    if profile && no_sign_request {
        return Err(usage("--profile and --no-sign-request exclude each other"));
    }
    Ok(())
}
