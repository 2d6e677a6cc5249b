//! The pure pieces every view's mapping uses: what backs a path (`node`) and the geometry of
//! regions of an array (`regions`). No I/O.

pub mod node;
pub mod regions;
