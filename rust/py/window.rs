//! `window` and `select` (SPEC §5): the limits of the caller's `WindowOptions` read into the
//! core's options, the core's window turned into Python objects.

use super::errors::{invalid_argument, Failure};
use super::history::{History, Reads};
use super::library::{int, Library};
use crate::protocol::Violation;
use crate::window::{self as core_window, Buffers, CutBy, Window, WindowOptions};
use pyo3::exceptions::{PyImportError, PyOverflowError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};
use std::cell::RefCell;

thread_local! {
    /// Room for the next window's selection (`Buffers` holds no message between windows).
    /// A window built while another is (from a callback) finds none and makes its own.
    static BUFFERS: RefCell<Option<Buffers>> = const { RefCell::new(None) };
}

fn take_buffers() -> Buffers {
    BUFFERS
        .with(|kept| kept.try_borrow_mut().ok().and_then(|mut kept| kept.take()))
        .unwrap_or_default()
}

fn keep_buffers(buffers: Buffers) {
    BUFFERS.with(|kept| {
        if let Ok(mut kept) = kept.try_borrow_mut() {
            if kept.is_none() {
                *kept = Some(buffers);
            }
        }
    });
}

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

/// A token budget as the core holds it (`limit`'s rules). Most budgets fit in 64 bits, whose
/// conversion is one call; a larger one is read whole (token sums can pass 2**64).
fn budget(value: &Bound<'_, PyAny>) -> Option<u128> {
    let small = value
        .is_exact_instance_of::<PyInt>()
        .then(|| value.extract::<u64>().ok());
    match small.flatten() {
        Some(small) => Some(u128::from(small)),
        None => limit(value, u128::MAX),
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

/// The core's options from the limits a `WindowOptions` was checked into (its `_limits`, which
/// `window.py` hands over), checked again as the reference does: a frozen value can still be
/// changed with `object.__setattr__`.
fn options(limits: &Bound<'_, PyAny>) -> Result<WindowOptions, Failure> {
    let py = limits.py();
    let limits = limits.cast_exact::<PyTuple>().ok();
    let read = || -> Option<WindowOptions> {
        let limits = limits?;
        if limits.len() != 6 {
            return None;
        }
        let item = |index| limits.get_item(index).ok();
        let budget = item(4)?;
        let max_attached_tokens = if budget.is_none() {
            None
        } else {
            Some(self::budget(&budget)?)
        };
        let compact = item(2)?;
        Some(WindowOptions {
            max_attached_turns: limit(&item(0)?, usize::MAX)?,
            max_attached_messages: limit(&item(1)?, usize::MAX)?,
            compact_completed_tool_turns: compact.cast_exact::<PyBool>().ok()?.is_true(),
            compression_keep_recent_turns: limit(&item(3)?, usize::MAX)?,
            max_attached_tokens,
            has_current_turn: current_turn(&item(5)?)?,
            has_system: false,
        })
    };
    read().ok_or_else(|| {
        invalid_argument(
            py,
            "options were not checked: make them with WindowOptions(...)".to_owned(),
        )
    })
}

/// The window's messages (system first) and how they were chosen.
struct Chosen<'py> {
    messages: Bound<'py, PyList>,
    has_system: bool,
    window: Window,
}

fn choose<'py>(
    library: &Library,
    messages: &Bound<'py, PyAny>,
    system: Option<Bound<'py, PyAny>>,
    use_leading_system: bool,
    options: WindowOptions,
    count_tokens: Option<Bound<'py, PyAny>>,
    turn_statuses: Option<Bound<'py, PyAny>>,
) -> Result<Chosen<'py>, Failure> {
    // A default window reads about fifty messages.
    let reads = Reads::with_capacity(64);
    let mut history = History::new(library, messages, &reads)?;
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
    let mut buffers = take_buffers();
    let selected = core_window::select_in(&mut history, &options, &mut buffers);
    let mut result = match selected {
        Ok(result) => result,
        Err(error) => {
            keep_buffers(buffers);
            return Err(error);
        }
    };
    // Every message exists before the list does: making a synthetic result runs Python code,
    // which must never see a list that is not full.
    let system = history.system.take();
    // A synthetic result closes a missing one, which is a repair.
    let synthetic = !result.repairs.is_empty();
    let list = history.into_list(&result.items, system, synthetic);
    buffers.give_back(std::mem::take(&mut result.items));
    keep_buffers(buffers);
    Ok(Chosen {
        messages: list?,
        has_system: options.has_system,
        window: result,
    })
}

fn violation_tuple<'py>(py: Python<'py>, v: &Violation) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            v.kind.name(),
            v.message_id.as_str(),
            v.tool_call_id.as_str(),
        ],
    )
}

fn cut_by_name<'py>(
    py: Python<'py>,
    library: &Library,
    cut_by: Option<CutBy>,
) -> Bound<'py, PyAny> {
    let [turns, messages, tokens] = &library.cut_names;
    let name = match cut_by {
        Some(CutBy::Turns) => turns,
        Some(CutBy::Messages) => messages,
        Some(CutBy::Tokens) => tokens,
        None => return py.None().into_bound(py),
    };
    name.bind(py).clone().into_any()
}

/// The whole window for options a core handles alone (no compressor, the default estimator):
/// a `ContextWindow`, made as `_core_types.new_window` makes it. `system` None takes the
/// history's leading system message.
#[pyfunction]
#[pyo3(signature = (messages, system, limits, turn_statuses))]
pub fn window<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    system: Option<Bound<'py, PyAny>>,
    limits: &Bound<'py, PyAny>,
    turn_statuses: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let library = Library::get(py)?;
    let options = self::options(limits)?;
    whole_window(library, messages, system, options, turn_statuses)
}

fn whole_window<'py>(
    library: &Library,
    messages: &Bound<'py, PyAny>,
    system: Option<Bound<'py, PyAny>>,
    options: WindowOptions,
    turn_statuses: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = messages.py();
    let use_leading_system = system.is_none();
    let Chosen {
        messages: list,
        window: result,
        ..
    } = choose(
        library,
        messages,
        system,
        use_leading_system,
        options,
        None,
        turn_statuses,
    )?;
    let repairs = PyList::empty(py);
    for v in &result.repairs {
        repairs.append(
            library
                .protocol_violation
                .bind(py)
                .call1(violation_tuple(py, v)?)?,
        )?;
    }
    let unread: [Bound<'py, PyAny>; 4] = [
        messages.clone(),
        int(py, result.seen_history_turns),
        int(py, result.unread_end),
        library.engine.bind(py).clone().into_any(),
    ];
    let values: [Bound<'py, PyAny>; 7] = [
        list.into_any(),
        int(py, result.estimated_tokens),
        int(py, result.attached_turns),
        int(py, result.compacted_turns),
        cut_by_name(py, library, result.cut_by),
        repairs.into_any(),
        PyTuple::new(py, unread)?.into_any(),
    ];
    let window = library
        .object_new
        .bind(py)
        .call1(library.new_window_args.bind(py))?;
    for (slot, value) in library.window_slots.iter().zip(&values) {
        slot.write(&window, value)?;
    }
    Ok(window)
}

/// Rules 1-7 of SPEC §5, for the shared layer to finish (compressor, estimator): the
/// `WindowCore` tuple of `_reference/window.py`.
#[pyfunction]
#[pyo3(signature = (messages, system, use_leading_system, limits, count_tokens, turn_statuses))]
pub fn select<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    system: Option<Bound<'py, PyAny>>,
    use_leading_system: bool,
    limits: &Bound<'py, PyAny>,
    count_tokens: Option<Bound<'py, PyAny>>,
    turn_statuses: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let library = Library::get(py)?;
    let options = self::options(limits)?;
    let Chosen {
        messages,
        has_system,
        window: result,
    } = choose(
        library,
        messages,
        system,
        use_leading_system,
        options,
        count_tokens,
        turn_statuses,
    )?;
    let repairs: PyResult<Vec<_>> = result
        .repairs
        .iter()
        .map(|v| violation_tuple(py, v))
        .collect();
    let values: [Bound<'py, PyAny>; 11] = [
        messages.into_any(),
        has_system.into_pyobject(py)?.to_owned().into_any(),
        int(py, result.older_count),
        int(py, result.older_tokens),
        int(py, result.estimated_tokens),
        int(py, result.attached_turns),
        int(py, result.compacted_turns),
        cut_by_name(py, library, result.cut_by),
        PyList::new(py, repairs?)?.into_any(),
        int(py, result.seen_history_turns),
        int(py, result.unread_end),
    ];
    PyTuple::new(py, values)
}

/// What `window.py` hands the native `build_window` on import: its Python implementation
/// (every call off the plain path goes there with the very same arguments, so its errors are
/// the Python function's) and the cache that makes a `system` str its `SystemMessage`.
struct Entry {
    fallback: Py<PyAny>,
    system_message: Py<PyAny>,
}

static ENTRY: PyOnceLock<Entry> = PyOnceLock::new();

/// Registers `window.build_window`'s Python implementation and `window._system_message`
/// with the native entry; the first registration stays (False for a later one).
#[pyfunction]
#[pyo3(signature = (fallback, system_message, /))]
pub fn register_build_window(
    py: Python<'_>,
    fallback: Bound<'_, PyAny>,
    system_message: Bound<'_, PyAny>,
) -> bool {
    ENTRY
        .set(
            py,
            Entry {
                fallback: fallback.unbind(),
                system_message: system_message.unbind(),
            },
        )
        .is_ok()
}

/// `build_window`'s keywords, in the order of its signature.
const KEYWORDS: [&str; 11] = [
    "system",
    "max_attached_turns",
    "max_attached_messages",
    "compact_completed_tool_turns",
    "compression_keep_recent_turns",
    "context_compressor",
    "max_attached_tokens",
    "token_estimator",
    "turn_statuses",
    "current_turn",
    "current_turn_tool_results_kept",
];

/// The plain arguments of one call: what the Rust core builds alone, with the options
/// `WindowOptions` checks them into.
struct Plain<'py> {
    messages: Bound<'py, PyAny>,
    system: Option<Bound<'py, PyAny>>,
    options: WindowOptions,
    statuses: Option<Bound<'py, PyAny>>,
}

/// The keyword arguments by their place in `KEYWORDS`; None when one is not a keyword of
/// `build_window`. The loop between two steps of the dict's iterator runs no Python code and
/// makes no object the garbage collector tracks (it leaves on the first odd key), so nothing
/// can change the dict while it is iterated.
fn keywords<'py>(kwargs: &Bound<'py, PyDict>) -> Option<[Option<Bound<'py, PyAny>>; 11]> {
    let mut values: [Option<Bound<'py, PyAny>>; 11] = Default::default();
    for (key, value) in kwargs.iter() {
        let key = key.cast_exact::<PyString>().ok()?.to_str().ok()?;
        let place = KEYWORDS.iter().position(|name| *name == key)?;
        values[place] = Some(value);
    }
    Some(values)
}

/// The plain call's arguments (exact ints >= 0 and bools for the limits, no compressor or
/// estimator, `system` None, an exact `SystemMessage` or an exact str, `turn_statuses` None
/// or an exact dict); None for any other call, which the Python implementation checks in full.
/// A keyword's value unless it is missing or None.
fn given<'a, 'py>(value: &'a Option<Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    value.as_ref().filter(|value| !value.is_none())
}

fn plain<'py>(
    library: &Library,
    entry: &Entry,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Option<Plain<'py>>> {
    let py = args.py();
    let mut options = WindowOptions {
        max_attached_turns: 10,
        max_attached_messages: 100,
        compact_completed_tool_turns: false,
        compression_keep_recent_turns: 2,
        max_attached_tokens: None,
        has_current_turn: true,
        has_system: false,
    };
    if args.len() != 1 {
        return Ok(None);
    }
    let messages = args.get_item(0)?;
    let Some(kwargs) = kwargs else {
        return Ok(Some(Plain {
            messages,
            system: None,
            options,
            statuses: None,
        }));
    };
    let Some(
        [system, turns, max_messages, compact, keep, compressor, tokens, estimator, statuses, current, kept],
    ) = keywords(kwargs)
    else {
        return Ok(None);
    };
    // Results kept in the current turn are applied above the core (window.py).
    if given(&compressor).is_some() || given(&estimator).is_some() || given(&kept).is_some() {
        return Ok(None);
    }
    if let Some(current) = &current {
        let Some(current) = current_turn(current) else {
            return Ok(None);
        };
        options.has_current_turn = current;
    }
    if let Some(turns) = &turns {
        let Some(turns) = limit(turns, usize::MAX) else {
            return Ok(None);
        };
        options.max_attached_turns = turns;
    }
    if let Some(max_messages) = &max_messages {
        let Some(max_messages) = limit(max_messages, usize::MAX) else {
            return Ok(None);
        };
        options.max_attached_messages = max_messages;
    }
    if let Some(keep) = &keep {
        let Some(keep) = limit(keep, usize::MAX) else {
            return Ok(None);
        };
        options.compression_keep_recent_turns = keep;
    }
    if let Some(compact) = &compact {
        let Ok(compact) = compact.cast_exact::<PyBool>() else {
            return Ok(None);
        };
        options.compact_completed_tool_turns = compact.is_true();
    }
    if let Some(tokens) = given(&tokens) {
        let Some(tokens) = budget(tokens) else {
            return Ok(None);
        };
        options.max_attached_tokens = Some(tokens);
    }
    let statuses = match given(&statuses) {
        None => None,
        Some(statuses) if statuses.is_exact_instance_of::<PyDict>() => Some(statuses.clone()),
        Some(_) => return Ok(None),
    };
    let system = match given(&system) {
        None => None,
        Some(system) if system.get_type().is(library.kinds[0].bind(py)) => Some(system.clone()),
        // The Python implementation's cache: one message object per text.
        Some(system) if system.is_exact_instance_of::<PyString>() => {
            Some(entry.system_message.bind(py).call1((system,))?)
        }
        Some(_) => return Ok(None),
    };
    Ok(Some(Plain {
        messages,
        system,
        options,
        statuses,
    }))
}

/// Build the window for one model call; ``messages`` (oldest first) is never modified.
///
/// >>> from agentctx_fast import UserMessage, AiMessage
/// >>> history = [UserMessage("hi", message_id="u1"), AiMessage("hello", message_id="a1"),
/// ...            UserMessage("order ORD-1?", message_id="u2")]
/// >>> w = build_window(history, system="Be brief.", max_attached_turns=0)
/// >>> [m.message_id for m in w.messages], w.cut_by
/// (['system', 'u2'], 'max_attached_turns')
#[pyfunction]
#[pyo3(
    signature = (*args, **kwargs),
    text_signature = "(messages, *, system=None, max_attached_turns=10, \
        max_attached_messages=100, compact_completed_tool_turns=False, \
        compression_keep_recent_turns=2, context_compressor=None, max_attached_tokens=None, \
        token_estimator=None, turn_statuses=None, current_turn='last', \
        current_turn_tool_results_kept=None)"
)]
pub fn build_window<'py>(
    py: Python<'py>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let library = Library::get(py)?;
    let entry = ENTRY.get(py).ok_or_else(|| {
        PyImportError::new_err("agentctx_fast.window did not register build_window on import")
    })?;
    match plain(library, entry, args, kwargs)? {
        Some(Plain {
            messages,
            system,
            options,
            statuses,
        }) => whole_window(library, &messages, system, options, statuses),
        None => entry.fallback.bind(py).call(args, kwargs),
    }
}
