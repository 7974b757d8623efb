//! How far back a window reaches (`crate::reach`) in the newest messages of a Python history.

use super::errors::invalid_argument;
use super::history::History;
use super::library::Library;
use super::window::options as compiled;
use crate::window::WindowOptions;
use pyo3::prelude::*;
use pyo3::types::PyBool;

/// Where the window's reach starts in `messages`, or None if it may reach further back:
/// the window of `options` (a `CoreOptions`) with `has_current_turn` for its current turn.
#[pyfunction]
pub fn window_reach(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    options: &Bound<'_, PyAny>,
    has_current_turn: &Bound<'_, PyAny>,
) -> PyResult<Option<usize>> {
    let Ok(has_current_turn) = has_current_turn.cast_exact::<PyBool>() else {
        let shown = has_current_turn.repr()?;
        let message = format!("window_reach has_current_turn must be a bool, got {shown}");
        return Err(invalid_argument(py, message));
    };
    let options = WindowOptions {
        has_current_turn: has_current_turn.is_true(),
        ..compiled(options)?
    };
    let mut history = History::new(Library::get(py)?, messages)?;
    crate::reach::reach(&mut history, &options)
}
