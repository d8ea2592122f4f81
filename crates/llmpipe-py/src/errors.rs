//! The boundary between Python and the core crates, in one place.
//!
//! Every binding calls the core through [`enter`] (or [`enter_interruptible`] for a call that can run
//! for minutes): the GIL is released for the call and a core error becomes its class in
//! `llmpipe.errors`, the one exception hierarchy of llmpipe (`LlmpipeError` and its subclasses), so
//! Python code never translates errors. A long call polls a stop flag that Ctrl-C sets: the call
//! returns within a fraction of a second and Python sees `KeyboardInterrupt`.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a long call checks for a pending signal.
const POLL: Duration = Duration::from_millis(50);

/// The `llmpipe.errors` class a core error is raised as.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// A parameter or configuration value is invalid: `ConfigError`.
    Config,
    /// A shard is malformed or does not match: `ShardError`.
    Shard,
    /// A tokenizer file or argument is invalid: `TokenizerError` (an `InputError`).
    Tokenizer,
    /// An input could not be read: `InputError`.
    Input,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Config => "ConfigError",
            Kind::Shard => "ShardError",
            Kind::Tokenizer => "TokenizerError",
            Kind::Input => "InputError",
        }
    }

    fn cell(self) -> &'static PyOnceLock<Py<PyType>> {
        static CLASSES: [PyOnceLock<Py<PyType>>; 4] =
            [PyOnceLock::new(), PyOnceLock::new(), PyOnceLock::new(), PyOnceLock::new()];
        &CLASSES[self as usize]
    }

    /// The exception `llmpipe.errors.<class>(message)`.
    pub fn err(self, message: impl Into<String>) -> PyErr {
        let message = message.into();
        Python::attach(|py| {
            let class = self.cell().get_or_try_init(py, || -> PyResult<Py<PyType>> {
                let module = py.import("llmpipe.errors")?;
                Ok(module.getattr(self.class_name())?.cast_into::<PyType>()?.unbind())
            });
            match class {
                Ok(c) => PyErr::from_type(c.bind(py).clone(), message),
                Err(e) => e,
            }
        })
    }
}

/// `ConfigError::new_err(msg)` and friends: the argument checks of the bindings read like pyo3's.
macro_rules! kinds {
    ($($name:ident => $kind:ident),* $(,)?) => {$(
        #[doc = concat!("Raises `llmpipe.errors.", stringify!($name), "`.")]
        pub struct $name;
        impl $name {
            pub fn new_err(message: impl Into<String>) -> PyErr {
                Kind::$kind.err(message)
            }
        }
    )*};
}
kinds!(ConfigError => Config, ShardError => Shard, InputError => Input);

/// A core error and the `llmpipe.errors` class it is raised as.
pub trait CoreError: Send {
    fn into_py(self) -> PyErr;
}

impl CoreError for PyErr {
    fn into_py(self) -> PyErr {
        self
    }
}

impl CoreError for Infallible {
    fn into_py(self) -> PyErr {
        match self {}
    }
}

impl CoreError for String {
    fn into_py(self) -> PyErr {
        Kind::Config.err(self)
    }
}

impl CoreError for llmpipe_bpe::Error {
    fn into_py(self) -> PyErr {
        let kind = if matches!(self, llmpipe_bpe::Error::Io(_)) { Kind::Input } else { Kind::Tokenizer };
        kind.err(self.to_string())
    }
}

impl CoreError for llmpipe_dedup::DedupError {
    fn into_py(self) -> PyErr {
        Kind::Config.err(self.to_string())
    }
}

impl CoreError for llmpipe_shard::pack::PackError {
    fn into_py(self) -> PyErr {
        Kind::Config.err(self.to_string())
    }
}

/// Run `f` with the GIL released; its error becomes the matching `llmpipe.errors` exception.
pub fn enter<T: Send, E: CoreError>(py: Python<'_>, f: impl FnOnce() -> Result<T, E> + Send) -> PyResult<T> {
    py.detach(f).map_err(CoreError::into_py)
}

/// Run an infallible core call with the GIL released.
pub fn enter_ok<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    py.detach(f)
}

/// [`enter`] for a call that can run for minutes: `f` polls the stop flag it is given. This thread
/// checks for a pending signal every [`POLL`]; on Ctrl-C it sets the flag, waits for `f` to return
/// and raises `KeyboardInterrupt` (whatever `f` returned).
pub fn enter_interruptible<T: Send, E: CoreError>(
    py: Python<'_>,
    f: impl FnOnce(&AtomicBool) -> Result<T, E> + Send,
) -> PyResult<T> {
    let stop = AtomicBool::new(false);
    let mut interrupt: Option<PyErr> = None;
    let out = py.detach(|| {
        std::thread::scope(|s| {
            let caller = std::thread::current();
            let stop = &stop;
            let worker = s.spawn(move || {
                let r = f(stop);
                caller.unpark();
                r
            });
            while !worker.is_finished() {
                std::thread::park_timeout(POLL);
                if interrupt.is_none() {
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        interrupt = Some(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            worker.join()
        })
    });
    if let Some(e) = interrupt {
        return Err(e);
    }
    match out {
        Ok(r) => r.map_err(CoreError::into_py),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
