//! How far back a window reaches (`crate::reach`) in the newest messages of a Python history.

use super::errors::{invalid_argument, Failure, Where};
use super::history::{sequence, CoreRef, Items};
use super::library::Library;
use super::message::core_of;
use super::window::options as compiled;
use crate::model::{Item, Source};
use crate::window::WindowOptions;
use pyo3::prelude::*;
use pyo3::types::PyBool;

/// The messages as the core's `Source`. The reach reads no tokens and no statuses.
struct Tail<'a, 'py> {
    library: &'a Library,
    items: Items<'py>,
}

impl<'py> Source for Tail<'_, 'py> {
    type Error = Failure;
    type Message = CoreRef;

    fn len(&self) -> usize {
        self.items.len
    }

    fn get(&mut self, index: usize) -> Result<CoreRef, Failure> {
        let object = self.items.get(index)?;
        Ok(CoreRef(core_of(
            self.library,
            &object,
            Where::Index(index),
        )?))
    }

    fn tokens(&mut self, _items: &[Item]) -> Result<u128, Failure> {
        Ok(0)
    }

    fn system_tokens(&mut self) -> Result<u128, Failure> {
        Ok(0)
    }

    fn recorded_completed(&mut self, _turn_id: &str) -> Result<Option<bool>, Failure> {
        Ok(None)
    }
}

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
        return Err(invalid_argument(py, message).into());
    };
    let options = WindowOptions {
        has_current_turn: has_current_turn.is_true(),
        ..compiled(options)?
    };
    let library = Library::get(py)?;
    let mut tail = Tail {
        library,
        items: sequence(library, messages)?,
    };
    Ok(crate::reach::reach(&mut tail, &options)?)
}
