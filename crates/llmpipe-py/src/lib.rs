//! Python bindings for llmpipe. The only crate that depends on pyo3.
//!
//! Rules (docs/architecture.md): extract arguments, run the core with the GIL released
//! (`py.detach`), convert once at the end; one call per batch, never per document.
//! Each area registers its functions from its own file.

use pyo3::prelude::*;

mod bpe;
mod buffers;
mod dedup;
mod errors;
mod fasttext;
mod quality;
mod shard;
mod text;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<buffers::IdBuffer>()?;
    text::register(m)?;
    bpe::register(m)?;
    dedup::register(m)?;
    quality::register(m)?;
    fasttext::register(m)?;
    shard::register(m)?;
    Ok(())
}
