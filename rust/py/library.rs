//! The Python classes and values the binding relies on, captured and checked by
//! `capture_library`, which the backend switch calls once the package is imported (the message
//! classes derive from the extension's `MessageBase`, so they do not exist yet when the
//! extension is imported). The classes are taken from the reference's modules, as the reference
//! imported them, so both cores know the same ones; later replacing a module attribute changes
//! nothing here.

use crate::model::Kind;
use crate::read::Attr;
use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyString, PyType};

/// The library's message classes by kind, in the order a subclass is matched.
pub const KINDS: [(Kind, &str); 6] = [
    (Kind::System, "SystemMessage"),
    (Kind::User, "UserMessage"),
    (Kind::Ai, "AiMessage"),
    (Kind::Tool, "ToolMessage"),
    (Kind::Action, "AgentActionMessage"),
    (Kind::Form, "AgentFormMessage"),
];

pub struct Library {
    pub message: Py<PyType>,
    pub kinds: [Py<PyType>; 6],
    pub text_part: Py<PyType>,
    pub tool_call: Py<PyType>,
    pub tool_message: Py<PyType>,
    pub sequence: Py<PyAny>,
    pub invalid_argument: Py<PyType>,
    pub invalid_message_type: Py<PyType>,
    pub completed: Py<PyAny>,
    pub index: Py<PyAny>,
    /// The names of `crate::read::Attr`, interned.
    pub attrs: [Py<PyString>; 12],
}

static LIBRARY: PyOnceLock<Library> = PyOnceLock::new();

fn class<'py>(module: &Bound<'py, PyModule>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let value = module.getattr(name)?;
    value.cast_into::<PyType>().map_err(|_| {
        PyImportError::new_err(format!(
            "{}.{name} is not a class",
            module.name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })
}

fn subclass<'py>(
    module: &Bound<'py, PyModule>,
    name: &str,
    base: &Bound<'py, PyType>,
) -> PyResult<Bound<'py, PyType>> {
    let found = class(module, name)?;
    if !found.is_subclass(base)? {
        return Err(PyImportError::new_err(format!(
            "agentctx_fast: {name} does not derive from {}",
            base.name()?
        )));
    }
    Ok(found)
}

impl Library {
    /// Imports and checks everything the binding uses.
    fn capture(py: Python<'_>) -> PyResult<Library> {
        // The classes as the reference imported them (`core/_reference/read.py`, `window.py`),
        // so both cores know the same ones whatever `core.messages`, `core.types` or `errors`
        // bound since.
        let messages = py.import("agentctx_fast.core._reference.read")?;
        let errors = py.import("agentctx_fast.errors")?;
        let types = py.import("agentctx_fast.core._reference.window")?;
        let message = class(&messages, "Message")?;
        let [system, user, ai, tool, action, form] =
            KINDS.map(|(_, name)| subclass(&messages, name, &message));
        let tool = tool?;
        let tool_message = tool.clone().unbind();
        let kinds = [system?, user?, ai?, tool, action?, form?].map(Bound::unbind);
        let base_error = class(&errors, "AgentCtxError")?;
        let turn_status = class(&types, "TurnStatus")?;
        let completed = turn_status.getattr("COMPLETED")?;
        if !completed.is_instance(&turn_status)? {
            return Err(PyImportError::new_err(
                "agentctx_fast: TurnStatus.COMPLETED is not a TurnStatus",
            ));
        }
        Ok(Library {
            message: message.unbind(),
            kinds,
            text_part: class(&messages, "TextPart")?.unbind(),
            tool_call: class(&messages, "ToolCall")?.unbind(),
            tool_message,
            sequence: py.import("collections.abc")?.getattr("Sequence")?.unbind(),
            invalid_argument: subclass(&messages, "InvalidArgumentError", &base_error)?.unbind(),
            invalid_message_type: subclass(&messages, "InvalidMessageTypeError", &base_error)?
                .unbind(),
            completed: completed.unbind(),
            index: py.import("operator")?.getattr("index")?.unbind(),
            attrs: Attr::NAMES.map(|name| PyString::intern(py, name).unbind()),
        })
    }

    /// The library, captured now if `capture_library` was not called. Capturing runs Python
    /// code (imports of modules already imported), which may call back in: the first capture to
    /// finish is kept, never waited for, so a nested call cannot deadlock.
    pub fn get(py: Python<'_>) -> PyResult<&Library> {
        if let Some(library) = LIBRARY.get(py) {
            return Ok(library);
        }
        let _ = LIBRARY.set(py, Library::capture(py)?);
        LIBRARY
            .get(py)
            .ok_or_else(|| PyImportError::new_err("agentctx_fast._native: no library"))
    }

    /// The kind of a library message class, by identity.
    #[inline]
    pub fn exact_kind(&self, class: &Bound<'_, PyType>) -> Option<Kind> {
        self.kinds
            .iter()
            .zip(KINDS)
            .find(|(known, _)| known.is(class))
            .map(|(_, (kind, _))| kind)
    }
}

/// Captures the classes the binding relies on, now that the package defines them.
#[pyfunction]
pub fn capture_library(py: Python<'_>) -> PyResult<()> {
    Library::get(py).map(|_| ())
}
