//! `CoreOptions`, `select` and `window_reach` (SPEC §5): the limits of a `WindowOptions`
//! compiled once into the core's options, the core's selection handed back as plain values
//! (`window.py` makes the `ContextWindow`), and how far back a window reaches
//! (`crate::reach`).

use super::history::{History, Reads};
use super::library::Library;
use super::protocol::violations;
use crate::error::CoreError;
use crate::window::{self as core_window, CutBy, WindowOptions};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple, PyType};

/// A limit as the core holds it: an exact int >= 0; one past the core's range is `max` (no
/// history reaches it, so the window is the exact limit's).
fn limit<T>(value: &Bound<'_, PyAny>, max: T) -> Option<T>
where
    T: for<'a, 'py> FromPyObject<'a, 'py, Error = PyErr>,
{
    if !value.is_exact_instance_of::<PyInt>() {
        return None;
    }
    match value.extract::<T>() {
        Ok(limit) => Some(limit),
        Err(error) if error.is_instance_of::<PyOverflowError>(value.py()) => {
            value.gt(0).ok()?.then_some(max)
        }
        Err(_) => None,
    }
}

/// `current_turn` as the core holds it: an exact str, `"last"` (true) or `"none"` (false).
fn current_turn(value: &Bound<'_, PyAny>) -> Option<bool> {
    match value.cast_exact::<PyString>().ok()?.to_str().ok()? {
        "last" => Some(true),
        "none" => Some(false),
        _ => None,
    }
}

/// The window limits of a `WindowOptions` in the core's form, made once when the options are
/// (`WindowOptions.__post_init__`) and immutable; `select` takes nothing else. The arguments
/// are `WindowOptions`' checked values; anything else is an `InvalidArgumentError`, as in the
/// reference's `CoreOptions`.
#[pyclass(frozen, module = "agentctx_fast._native")]
pub struct CoreOptions {
    options: WindowOptions,
    /// The arguments, which make these options again (`__reduce__`).
    args: Py<PyTuple>,
}

#[pymethods]
impl CoreOptions {
    #[new]
    #[pyo3(signature = (max_attached_turns, max_attached_messages, compact_completed_tool_turns,
        compression_keep_recent_turns, max_attached_tokens, current_turn))]
    fn new(
        max_attached_turns: &Bound<'_, PyAny>,
        max_attached_messages: &Bound<'_, PyAny>,
        compact_completed_tool_turns: &Bound<'_, PyAny>,
        compression_keep_recent_turns: &Bound<'_, PyAny>,
        max_attached_tokens: &Bound<'_, PyAny>,
        current_turn: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let read = || -> Option<WindowOptions> {
            let max_attached_tokens = if max_attached_tokens.is_none() {
                None
            } else {
                Some(limit(max_attached_tokens, u128::MAX)?)
            };
            Some(WindowOptions {
                max_attached_turns: limit(max_attached_turns, usize::MAX)?,
                max_attached_messages: limit(max_attached_messages, usize::MAX)?,
                compact_completed_tool_turns: compact_completed_tool_turns
                    .cast_exact::<PyBool>()
                    .ok()?
                    .is_true(),
                compression_keep_recent_turns: limit(compression_keep_recent_turns, usize::MAX)?,
                max_attached_tokens,
                has_current_turn: self::current_turn(current_turn)?,
                has_system: false,
            })
        };
        let py = current_turn.py();
        let Some(options) = read() else {
            return Err(CoreError::UncheckedOptions.into());
        };
        let args = [
            max_attached_turns,
            max_attached_messages,
            compact_completed_tool_turns,
            compression_keep_recent_turns,
            max_attached_tokens,
            current_turn,
        ];
        let args = PyTuple::new(py, args)?.unbind();
        Ok(CoreOptions { options, args })
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyType>, Bound<'py, PyTuple>) {
        (slf.get_type(), slf.get().args.bind(slf.py()).clone())
    }
}

/// The core's options held by `options`, or the error both cores give for anything that is not
/// a `CoreOptions` (e.g. a `WindowOptions` whose compiled form was replaced).
pub(super) fn options(options: &Bound<'_, PyAny>) -> PyResult<WindowOptions> {
    match options.cast_exact::<CoreOptions>() {
        Ok(options) => Ok(options.get().options.clone()),
        Err(_) => Err(CoreError::UncheckedOptions.into()),
    }
}

/// Rules 1-7 of SPEC §5, as plain values for `window.py` to finish (compressor, the window
/// object): the `WindowCore` tuple of `_reference/window.py`.
#[pyfunction]
#[pyo3(signature = (messages, system, use_leading_system, options, count_tokens, turn_statuses))]
pub fn select<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    system: Option<Bound<'py, PyAny>>,
    use_leading_system: bool,
    options: &Bound<'py, PyAny>,
    count_tokens: Option<Bound<'py, PyAny>>,
    turn_statuses: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    // Checked first, as the reference does: no message is read for options it refuses.
    let options = self::options(options)?;
    let arena = Reads::new();
    let mut history = History::new(Library::get(py)?, messages, &arena)?;
    history.system = system;
    if use_leading_system {
        history.take_leading_system()?;
    }
    history.count_tokens = count_tokens;
    history.statuses = turn_statuses;
    let options = WindowOptions {
        has_system: history.system.is_some(),
        ..options
    };
    let window = core_window::select(&mut history, &options)?;
    // Every message exists before the list does: making a synthetic result runs Python code,
    // which must never see a list that is not full. A synthetic result closes a missing one,
    // which is a repair.
    let system = history.system.take();
    let synthetic = !window.repairs.is_empty();
    let messages = history.into_list(&window.items, system, synthetic)?;
    let values = (
        messages,
        options.has_system,
        window.older_count,
        window.older_tokens,
        window.estimated_tokens,
        window.attached_turns,
        window.compacted_turns,
        window.cut_by.map(CutBy::name),
        violations(py, &window.repairs)?,
        window.seen_history_turns,
        window.unread_end,
    );
    values.into_pyobject(py)
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
    // The options first, as the reference checks them.
    let options = self::options(options)?;
    let Ok(has_current_turn) = has_current_turn.cast_exact::<PyBool>() else {
        let repr = has_current_turn.repr()?.to_string();
        let (what, expected) = ("window_reach has_current_turn", "a bool");
        return Err(CoreError::OutOfDomain {
            what,
            expected,
            repr,
        }
        .into());
    };
    let options = WindowOptions {
        has_current_turn: has_current_turn.is_true(),
        ..options
    };
    let arena = Reads::new();
    let mut history = History::new(Library::get(py)?, messages, &arena)?;
    crate::reach::reach(&mut history, &options)
}
