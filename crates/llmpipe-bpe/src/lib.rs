//! llmpipe-bpe: byte-level BPE training, encoding and decoding, HF tokenizer.json and tiktoken
//! rank files. Pure Rust; the Python bindings live in llmpipe-py.

pub mod bytemap;
pub mod hfjson;
pub mod model;
pub mod pattern;
pub mod pretok;
mod shorttab;
pub mod tiktoken;
pub mod train;

pub use model::{Allowed, EncodeState, Special, Tokenizer};
pub use pattern::{pattern_by_name, PreTokenizer};
pub use train::{train_files, TrainConfig};

/// Ask the CPU to bring the cache line at `p` in (a hint: never faults, whatever the address).
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch instruction reads nothing architecturally and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A file, argument or tokenizer definition is invalid.
    Invalid(String),
    /// An input file could not be read.
    Io(String),
    /// The caller's stop flag was set (Ctrl-C) while training.
    Interrupted,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Invalid(m) | Error::Io(m) => f.write_str(m),
            Error::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for Error {}

impl Tokenizer {
    /// Load tokenizer.json.
    pub fn from_json_file(path: &std::path::Path) -> Result<Self, Error> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        hfjson::from_json(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// Write tokenizer.json.
    pub fn save_json(&self, path: &std::path::Path) -> Result<(), Error> {
        std::fs::write(path, hfjson::to_json(self)).map_err(|e| Error::Io(format!("{}: {e}", path.display())))
    }
}
