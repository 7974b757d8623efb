//! A message's core: what the rules need of it, read once through its properties by the
//! core's reading rules (`crate::read`, over `Object`) and kept in the message's native base,
//! `MessageBase`, which every library message class derives from.
//!
//! A message is what its class and properties say: its kind is the library class it derives
//! from; `model_visible`, ids, text and tool calls are read as attributes, so a subclass that
//! overrides one is read the same way by both cores. Messages are immutable, so the core
//! never goes stale; one changed behind the library's back (`object.__setattr__`) keeps what
//! was first read, on both cores. No Python code can reach the kept core.

use super::errors::type_name;
use super::library::Library;
use super::tokens::count_str;
use crate::error::{CoreError, Where};
use crate::model::{Kind, MessageCore};
use crate::read::{self, Attr, Class, Str};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};
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

/// The kind of `message`, or the reference's error naming `at`.
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
    let is_message = class.is_subclass(library.message.bind(py))?;
    if is_message {
        for (known, kind) in &library.kinds {
            if class.is_subclass(known.bind(py))? {
                return Ok(*kind);
            }
        }
    }
    let at = at.to_string();
    let type_name = class.name().map(|n| n.to_string()).unwrap_or_default();
    Err(if is_message {
        CoreError::NoMessageKind { at, type_name }
    } else {
        CoreError::NotAMessage { at, type_name }
    }
    .into())
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
    let info = read::info(&Object::new(library, message), kind, at)?;
    Ok(MessageCore::new(info))
}

/// A Python value as the core's reading rules see it (`crate::read`).
struct Object<'a, 'py> {
    library: &'a Library,
    value: Bound<'py, PyAny>,
}

impl<'a, 'py> Object<'a, 'py> {
    fn new(library: &'a Library, value: &Bound<'py, PyAny>) -> Self {
        let value = value.clone();
        Object { library, value }
    }
}

impl read::Value for Object<'_, '_> {
    type Error = PyErr;

    fn attr(&self, attr: Attr) -> PyResult<Self> {
        let name = self.library.attrs[attr as usize].bind(self.value.py());
        Ok(Object::new(self.library, &self.value.getattr(name)?))
    }

    fn is_none(&self) -> bool {
        self.value.is_none()
    }

    fn is_true(&self) -> PyResult<bool> {
        self.value.is_truthy()
    }

    fn as_str(&self) -> Str<'_> {
        match self.value.cast::<PyString>().map(|text| text.to_str()) {
            Err(_) => Str::NotAStr,
            Ok(Ok(text)) => Str::Utf8(text),
            Ok(Err(_)) => Str::Surrogates,
        }
    }

    fn str_tokens(&self) -> PyResult<u64> {
        count_str(self.value.cast::<PyString>()?)
    }

    fn is_a(&self, class: Class) -> PyResult<bool> {
        let library = self.library;
        let class = match class {
            Class::ToolCall => &library.tool_call,
            Class::TextPart => &library.text_part,
        };
        self.value
            .get_type()
            .is_subclass(class.bind(self.value.py()))
    }

    fn type_name(&self) -> String {
        type_name(&self.value)
    }

    fn each(&self, mut visit: impl FnMut(usize, Self) -> PyResult<()>) -> PyResult<()> {
        for (index, item) in self.value.try_iter()?.enumerate() {
            visit(index, Object::new(self.library, &item?))?;
        }
        Ok(())
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
    if let Some(known) = core.known_tokens() {
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
    let counted = read::tokens(&Object::new(library, message), core.info.kind, at)?;
    core.keep_tokens(counted);
    Ok(counted)
}
