//! The pure pieces every view's mapping uses: what backs a path (`node`) and the geometry of
//! regions of an array (`regions`), and escaping text for HTML and XML (`markup`). No I/O.

pub mod markup;
pub mod node;
pub mod regions;
