//! Language identification with `whatlang` (trigram profiles compiled into the binary: nothing is
//! downloaded at run time). Codes are ISO 639-3 (`eng`, `deu`, ...), as whatlang reports them.

/// At most this many bytes from the start of a document are looked at (trigram statistics settle
/// long before; this bounds the cost of very long documents).
pub const MAX_BYTES: usize = 4096;

/// (language code, confidence in [0, 1]); `("und", 0.0)` when nothing can be said.
pub fn detect(text: &str) -> (&'static str, f64) {
    let mut end = text.len().min(MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match whatlang::detect(&text[..end]) {
        Some(info) => (info.lang().code(), info.confidence()),
        None => ("und", 0.0),
    }
}

/// Every language code the detector knows.
pub fn supported() -> Vec<&'static str> {
    whatlang::Lang::all().iter().map(|l| l.code()).collect()
}

/// English name of a code (for reports), if known.
pub fn name(code: &str) -> Option<&'static str> {
    whatlang::Lang::from_code(code).map(|l| l.eng_name())
}
