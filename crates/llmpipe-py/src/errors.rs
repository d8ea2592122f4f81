//! One base exception class and one subclass per core error family.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(_core, LlmpipeCoreError, PyException, "Base class of every error raised by llmpipe._core.");
create_exception!(_core, TokenizerError, LlmpipeCoreError, "A tokenizer file or argument is invalid.");
create_exception!(_core, ShardError, LlmpipeCoreError, "A shard is malformed or fails its checksum.");
create_exception!(_core, ConfigError, LlmpipeCoreError, "A parameter passed to the core is out of range.");

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("LlmpipeCoreError", py.get_type::<LlmpipeCoreError>())?;
    m.add("TokenizerError", py.get_type::<TokenizerError>())?;
    m.add("ShardError", py.get_type::<ShardError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    Ok(())
}
