//! A message's core: what the rules need of it, read once through its properties (as
//! `_reference/read.py` reads them: same order, same errors) and kept in the message's native
//! base, `MessageBase`, which every library message class derives from.
//!
//! A message is what its class and properties say: its kind is the library class it derives
//! from; `model_visible`, ids, text and tool calls are read as attributes, so a subclass that
//! overrides one is read the same way by both cores. Messages are immutable, so the core
//! never goes stale; one changed behind the library's back (`object.__setattr__`) keeps what
//! was first read, on both cores. No Python code can reach the kept core.

use super::errors::{invalid_argument, invalid_message_type, type_name, Where};
use super::library::{Library, KINDS};
use super::tokens::count_str;
use crate::model::{Kind, MessageInfo};
use crate::tokens::{MEDIA_PART_TOKENS, MESSAGE_OVERHEAD, TOOL_CALL_OVERHEAD};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};
use std::borrow::Borrow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The native base of every message class: it keeps the message's core, set on first use.
/// Copies and pickles of a message start without one (it is read again on first use).
#[pyclass(frozen, subclass, module = "agentctx_fast._native")]
pub struct MessageBase {
    core: OnceLock<Arc<MessageCore>>,
}

#[pymethods]
impl MessageBase {
    /// Takes whatever the message class's `__init__` takes; the fields are the class's own.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        MessageBase {
            core: OnceLock::new(),
        }
    }
}

/// What the rules need of one message, and its heuristic tokens once counted.
pub struct MessageCore {
    pub info: MessageInfo,
    /// Heuristic tokens, `u64::MAX` until first counted.
    tokens: AtomicU64,
}

impl MessageCore {
    /// The heuristic tokens counted so far (None until first counted).
    #[inline]
    pub fn known_tokens(&self) -> Option<u64> {
        let known = self.tokens.load(Ordering::Relaxed);
        (known != u64::MAX).then_some(known)
    }
}

/// How the core crate reads a message the binding holds: borrowed in a window, shared (kept
/// in its `MessageBase`) when streamed.
impl Borrow<MessageInfo> for &MessageCore {
    fn borrow(&self) -> &MessageInfo {
        &self.info
    }
}

impl Borrow<MessageInfo> for Arc<MessageCore> {
    fn borrow(&self) -> &MessageInfo {
        &self.info
    }
}

/// The kind of `message`, or `InvalidMessageTypeError` naming `at`.
#[inline]
pub fn kind_of(library: &Library, message: &Bound<'_, PyAny>, at: Where<'_>) -> PyResult<Kind> {
    let class = message.get_type();
    match library.exact_kind(&class) {
        Some(kind) => Ok(kind),
        None => kind_of_subclass(library, &class, at),
    }
}

#[cold]
fn kind_of_subclass(library: &Library, class: &Bound<'_, PyType>, at: Where<'_>) -> PyResult<Kind> {
    let py = class.py();
    let name = || class.name().map(|n| n.to_string()).unwrap_or_default();
    if !class.is_subclass(library.message.bind(py))? {
        return Err(invalid_message_type(
            py,
            format!("{at} is not a Message: got {}", name()),
        ));
    }
    for (known, (kind, _)) in library.kinds.iter().zip(KINDS) {
        if class.is_subclass(known.bind(py))? {
            return Ok(kind);
        }
    }
    Err(invalid_message_type(
        py,
        format!("{at} is a {}, which is no message kind", name()),
    ))
}

/// The core of `message`, read on first use and kept in its base. The first core kept stays
/// (one kept by a property's nested call while this one was read wins); one of another kind
/// (the message's class was reassigned) is not used, and a fresh one is read and not kept.
#[inline(always)]
pub fn core_of(
    library: &Library,
    message: &Bound<'_, PyAny>,
    at: Where<'_>,
) -> PyResult<Arc<MessageCore>> {
    let kind = kind_of(library, message, at)?;
    let Ok(base) = message.cast::<MessageBase>() else {
        // A message class made before the extension imported: nowhere to keep a core.
        return Ok(Arc::new(read_core(library, message, kind, at)?));
    };
    let kept = &base.get().core;
    match kept.get() {
        Some(core) if core.info.kind == kind => Ok(core.clone()),
        _ => keep_core(library, message, kind, kept, at),
    }
}

#[cold]
#[inline(never)]
fn keep_core(
    library: &Library,
    message: &Bound<'_, PyAny>,
    kind: Kind,
    kept: &OnceLock<Arc<MessageCore>>,
    at: Where<'_>,
) -> PyResult<Arc<MessageCore>> {
    let core = Arc::new(read_core(library, message, kind, at)?);
    let _ = kept.set(core.clone());
    match kept.get() {
        Some(first) if first.info.kind == kind => Ok(first.clone()),
        _ => Ok(core),
    }
}

#[cold]
#[inline(never)]
fn read_core(
    library: &Library,
    message: &Bound<'_, PyAny>,
    kind: Kind,
    at: Where<'_>,
) -> PyResult<MessageCore> {
    let py = message.py();
    let visible = message.getattr(intern!(py, "model_visible"))?.is_truthy()?;
    let message_id = identifier(
        &message.getattr(intern!(py, "message_id"))?,
        at,
        "message_id",
    )?;
    let mut info = MessageInfo::new(kind, &message_id);
    info.visible = visible;
    let turn_id = message.getattr(intern!(py, "turn_id"))?;
    info.turn_id = if turn_id.is_none() {
        None
    } else {
        Some(identifier(&turn_id, at, "turn_id")?)
    };
    match kind {
        Kind::Ai => {
            let text = optional_text(&message.getattr(intern!(py, "text"))?, at, "text")?;
            each_tool_call(library, message, at, |call, place| {
                info.call_ids
                    .push(identifier(&call.getattr(intern!(py, "id"))?, place, "id")?);
                info.call_names.push(identifier(
                    &call.getattr(intern!(py, "name"))?,
                    place,
                    "name",
                )?);
                Ok(())
            })?;
            let has_text = text.is_some_and(|text| !is_empty(&text));
            info.final_text = has_text && info.call_ids.is_empty();
        }
        Kind::Tool => {
            info.tool_call_id = identifier(
                &message.getattr(intern!(py, "tool_call_id"))?,
                at,
                "tool_call_id",
            )?;
        }
        _ => {}
    }
    Ok(MessageCore {
        info,
        tokens: AtomicU64::new(u64::MAX),
    })
}

/// `value` as a str (a str subclass's own methods never run), or `InvalidMessageTypeError`.
pub fn text<'a, 'py>(
    value: &'a Bound<'py, PyAny>,
    at: Where<'_>,
    field: &str,
) -> PyResult<&'a Bound<'py, PyString>> {
    value.cast::<PyString>().map_err(|_| {
        invalid_message_type(
            value.py(),
            format!("{at}.{field} must be a str, got {}", type_name(value)),
        )
    })
}

fn optional_text<'py>(
    value: &Bound<'py, PyAny>,
    at: Where<'_>,
    field: &str,
) -> PyResult<Option<Bound<'py, PyString>>> {
    if value.is_none() {
        return Ok(None);
    }
    Ok(Some(text(value, at, field)?.clone()))
}

/// An identifier: a str of valid Unicode (ids are compared exactly, as the reference's dict
/// keys are).
fn identifier(value: &Bound<'_, PyAny>, at: Where<'_>, field: &str) -> PyResult<String> {
    let string = text(value, at, field)?;
    match string.to_str() {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(invalid_argument(
            value.py(),
            format!("{at}.{field} holds a lone surrogate"),
        )),
    }
}

/// Whether a str holds any character, whatever its class says its length is (one that is not
/// UTF-8 holds a lone surrogate).
fn is_empty(text: &Bound<'_, PyString>) -> bool {
    text.to_str().is_ok_and(str::is_empty)
}

/// Visits each of an AI message's tool calls, checked to be a `ToolCall`, with the place
/// errors name it by (`…tool_calls[i]`).
fn each_tool_call<'py>(
    library: &Library,
    message: &Bound<'py, PyAny>,
    at: Where<'_>,
    mut visit: impl FnMut(&Bound<'py, PyAny>, Where<'_>) -> PyResult<()>,
) -> PyResult<()> {
    let py = message.py();
    for (index, call) in message
        .getattr(intern!(py, "tool_calls"))?
        .try_iter()?
        .enumerate()
    {
        let call = call?;
        let call = tool_call(library, &call, at, index)?;
        let place = format!("{at}.tool_calls[{index}]");
        visit(call, Where::Named(&place))?;
    }
    Ok(())
}

fn tool_call<'a, 'py>(
    library: &Library,
    call: &'a Bound<'py, PyAny>,
    at: Where<'_>,
    index: usize,
) -> PyResult<&'a Bound<'py, PyAny>> {
    let py = call.py();
    if call.get_type().is_subclass(library.tool_call.bind(py))? {
        Ok(call)
    } else {
        Err(invalid_message_type(
            py,
            format!(
                "{at}.tool_calls[{index}] is not a ToolCall: got {}",
                type_name(call)
            ),
        ))
    }
}

/// Heuristic tokens of a message, counted once per message and kept on its core.
#[inline(always)]
pub fn tokens(
    library: &Library,
    message: &Bound<'_, PyAny>,
    core: &MessageCore,
    at: Where<'_>,
) -> PyResult<u64> {
    let known = core.tokens.load(Ordering::Relaxed);
    if known != u64::MAX {
        return Ok(known);
    }
    count_and_keep(library, message, core, at)
}

#[cold]
#[inline(never)]
fn count_and_keep(
    library: &Library,
    message: &Bound<'_, PyAny>,
    core: &MessageCore,
    at: Where<'_>,
) -> PyResult<u64> {
    let counted = count_message(library, message, core.info.kind, at)?;
    core.tokens.store(counted, Ordering::Relaxed);
    Ok(counted)
}

/// The heuristic formula of one message (`_reference/read.py::count_message`).
fn count_message(
    library: &Library,
    message: &Bound<'_, PyAny>,
    kind: Kind,
    at: Where<'_>,
) -> PyResult<u64> {
    let py = message.py();
    let text_attr = intern!(py, "text");
    Ok(match kind {
        Kind::User => {
            let content = message.getattr(intern!(py, "content"))?;
            if let Ok(content) = content.cast::<PyString>() {
                MESSAGE_OVERHEAD + count_str(content)?
            } else {
                let mut total = MESSAGE_OVERHEAD;
                for (index, part) in content.try_iter()?.enumerate() {
                    let part = part?;
                    total += if part.get_type().is_subclass(library.text_part.bind(py))? {
                        let place = format!("{at}.content[{index}]");
                        count_str(text(
                            &part.getattr(text_attr)?,
                            Where::Named(&place),
                            "text",
                        )?)?
                    } else {
                        MEDIA_PART_TOKENS
                    };
                }
                total
            }
        }
        Kind::Ai => {
            let mut total = MESSAGE_OVERHEAD;
            if let Some(text) = optional_text(&message.getattr(text_attr)?, at, "text")? {
                total += count_str(&text)?;
            }
            each_tool_call(library, message, at, |call, place| {
                total += TOOL_CALL_OVERHEAD
                    + count_str(text(&call.getattr(intern!(py, "name"))?, place, "name")?)?
                    + count_str(text(
                        &call.getattr(intern!(py, "arguments"))?,
                        place,
                        "arguments",
                    )?)?;
                Ok(())
            })?;
            // Provider items last, only when there are any, counted from their JSON text.
            if message
                .getattr(intern!(py, "provider_items"))?
                .is_truthy()?
            {
                let items = message.getattr(intern!(py, "provider_text"))?;
                total += count_str(text(&items, at, "provider_text")?)?;
            }
            total
        }
        Kind::Tool | Kind::System => {
            MESSAGE_OVERHEAD + count_str(text(&message.getattr(text_attr)?, at, "text")?)?
        }
        Kind::Action | Kind::Form => 0,
    })
}
