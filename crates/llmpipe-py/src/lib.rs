//! Python bindings for llmpipe. The only crate that depends on pyo3.
//!
//! Rules (docs/architecture.md): extract arguments, run the core through `errors::enter` (GIL
//! released, core errors raised as `llmpipe.errors` classes; `enter_interruptible` for long calls,
//! which Ctrl-C stops), convert once at the end; one call per batch, never per document.
//! Each area registers its functions from its own file.

use pyo3::prelude::*;

mod bpe;
mod buffers;
mod curation;
mod dedup;
mod errors;
mod fasttext;
mod quality;
mod segments;
mod shard;
mod text;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<buffers::IdBuffer>()?;
    text::register(m)?;
    bpe::register(m)?;
    dedup::register(m)?;
    quality::register(m)?;
    fasttext::register(m)?;
    shard::register(m)?;
    segments::register(m)?;
    curation::register(m)?;
    Ok(())
}
