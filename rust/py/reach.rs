//! How far back a window reaches (`crate::reach`) in the newest messages of a Python history.

use super::errors::{invalid_argument, Failure, Where};
use super::history::{sequence, CoreRef, Items};
use super::library::Library;
use super::message::core_of;
use crate::model::{Item, Source};
use crate::window::WindowOptions;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

/// The messages as the core's `Source`. The reach reads no tokens and no statuses.
struct Tail<'a, 'py> {
    library: &'a Library,
    items: Items<'py>,
}

impl<'py> Source for Tail<'_, 'py> {
    type Error = Failure;
    type Message = CoreRef<'py>;

    fn len(&self) -> usize {
        self.items.len
    }

    fn get(&mut self, index: usize) -> Result<CoreRef<'py>, Failure> {
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

/// `value` as a limit: an int >= 0 (past `usize`, its maximum: no history reaches it).
fn limit(name: &str, value: &Bound<'_, PyAny>) -> Result<usize, Failure> {
    if value.is_exact_instance_of::<PyInt>() && value.ge(0)? {
        return Ok(value.extract::<usize>().unwrap_or(usize::MAX));
    }
    Err(bad(name, "an int >= 0", value))
}

fn flag(name: &str, value: &Bound<'_, PyAny>) -> Result<bool, Failure> {
    match value.cast_exact::<PyBool>() {
        Ok(flag) => Ok(flag.is_true()),
        Err(_) => Err(bad(name, "a bool", value)),
    }
}

fn bad(name: &str, what: &str, value: &Bound<'_, PyAny>) -> Failure {
    match value.repr() {
        Ok(shown) => invalid_argument(
            value.py(),
            format!("window_reach {name} must be {what}, got {shown}"),
        ),
        Err(error) => error.into(),
    }
}

/// Where the window's reach starts in `messages`, or None if it may reach further back.
#[pyfunction]
pub fn window_reach(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    max_attached_turns: &Bound<'_, PyAny>,
    max_attached_messages: &Bound<'_, PyAny>,
    compact_completed_tool_turns: &Bound<'_, PyAny>,
    compression_keep_recent_turns: &Bound<'_, PyAny>,
    has_current_turn: &Bound<'_, PyAny>,
) -> PyResult<Option<usize>> {
    let options = WindowOptions {
        max_attached_turns: limit("max_attached_turns", max_attached_turns)?,
        max_attached_messages: limit("max_attached_messages", max_attached_messages)?,
        compact_completed_tool_turns: flag(
            "compact_completed_tool_turns",
            compact_completed_tool_turns,
        )?,
        compression_keep_recent_turns: limit(
            "compression_keep_recent_turns",
            compression_keep_recent_turns,
        )?,
        max_attached_tokens: None,
        has_current_turn: flag("has_current_turn", has_current_turn)?,
        has_system: false,
    };
    let library = Library::get(py)?;
    let mut tail = Tail {
        library,
        items: sequence(library, messages)?,
    };
    Ok(crate::reach::reach(&mut tail, &options)?)
}
