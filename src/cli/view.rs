//! The "View" section: how the store is presented.

use crate::views::OmeInV2;
use crate::views::ViewKind;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "View")]
pub struct ViewFlags {
    /// How the store is presented (decoded and v2 are read-only).
    #[arg(long, value_enum, default_value = "unsharded")]
    pub view: ViewKind,
    /// In the v2 and v2-decoded views, OME-Zarr 0.5 metadata of v3 groups is written as
    /// OME-Zarr 0.4 (`translate`), which the 0.4-only bioimaging readers need, or left as it
    /// is (`keep`).
    #[arg(long, value_enum, default_value = "translate", value_name = "MODE")]
    pub v2_ome: OmeInV2,
}
