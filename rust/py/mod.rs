//! The only code that knows PyO3: the binding of the core, one file per core concept (as
//! huggingface tokenizers' bindings mirror its core). It uses PyO3's safe API only (no `unsafe`,
//! no raw C-API call) and the stable ABI.
//!
//! - `library`: the Python classes the binding relies on, captured and checked once;
//! - `message`: `MessageBase`, the native base of every message class, and a message's core
//!   (what the rules need of it), read once and kept in that base;
//! - `history`: a caller's history as the core's `Source`, each index read at most once;
//! - `window`, `turns`, `protocol`, `tokens`, `decode`: the entry points of each core concept;
//! - `errors`: where core errors become the exceptions the pure-Python reference raises.
//!
//! The binding reads no private attribute of the Python package: a `WindowOptions` holds the
//! `CoreOptions` it compiled into, which `window.py` hands to `select`, and `window.py` makes
//! the `ContextWindow` of the values `select` returns.

// The compiler holds the binding to the safe API (PyO3's macros allow their own expansions).
#![deny(unsafe_code)]

mod decode;
mod errors;
mod history;
mod library;
mod message;
mod protocol;
mod tokens;
mod turns;
mod window;

use pyo3::prelude::*;

/// The extension module. It imports nothing of the package: the message classes derive from
/// its `MessageBase`, so the backend switch calls `capture_library` once they exist.
#[pymodule(gil_used = true)]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_class::<message::MessageBase>()?;
    module.add_function(wrap_pyfunction!(library::capture_library, module)?)?;
    module.add_class::<window::CoreOptions>()?;
    module.add_function(wrap_pyfunction!(window::select, module)?)?;
    module.add_function(wrap_pyfunction!(turns::segment, module)?)?;
    module.add_function(wrap_pyfunction!(window::window_reach, module)?)?;
    module.add_function(wrap_pyfunction!(turns::count_turns, module)?)?;
    module.add_function(wrap_pyfunction!(protocol::validate, module)?)?;
    module.add_function(wrap_pyfunction!(tokens::count_text, module)?)?;
    module.add_function(wrap_pyfunction!(tokens::message_tokens, module)?)?;
    module.add_function(wrap_pyfunction!(decode::decode_message, module)?)?;
    module.add_function(wrap_pyfunction!(decode::set_record_schema, module)?)?;
    module.add_function(wrap_pyfunction!(tokens::bpe_count_text, module)?)?;
    Ok(())
}
