//! The Python classes and values the binding relies on, handed over once by the backend switch
//! (`capture_library(*LIBRARY)`: the message classes derive from the extension's
//! `MessageBase`, so they do not exist yet when the extension is imported). They are the
//! reference's own (`core/_reference/api.py::LIBRARY`), so both cores know the same ones;
//! later replacing a module attribute changes nothing here.

use crate::model::Kind;
use crate::read::Attr;
use pyo3::exceptions::{PyImportError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyType};

pub struct Library {
    pub message: Py<PyType>,
    /// The message classes by kind, in the order a subclass is matched.
    pub kinds: [(Py<PyType>, Kind); 6],
    pub text_part: Py<PyType>,
    pub tool_call: Py<PyType>,
    pub tool_message: Py<PyType>,
    pub invalid_argument: Py<PyType>,
    pub invalid_message_type: Py<PyType>,
    pub completed: Py<PyAny>,
    pub sequence: Py<PyAny>,
    pub index: Py<PyAny>,
    /// The names of `crate::read::Attr`, interned.
    pub attrs: [Py<PyString>; 12],
}

static LIBRARY: PyOnceLock<Library> = PyOnceLock::new();

impl Library {
    /// The library, or `ImportError` before the backend switch handed it over.
    pub fn get(py: Python<'_>) -> PyResult<&Library> {
        LIBRARY
            .get(py)
            .ok_or_else(|| PyImportError::new_err("agentctx_fast._native: no library captured"))
    }

    /// The kind of a library message class, by identity.
    #[inline]
    pub fn exact_kind(&self, class: &Bound<'_, PyType>) -> Option<Kind> {
        self.kinds
            .iter()
            .find(|(known, _)| known.is(class))
            .map(|(_, kind)| *kind)
    }
}

/// Keeps the classes the binding relies on (the first library handed over stays).
#[pyfunction]
#[pyo3(signature = (message, kinds, text_part, tool_call, invalid_argument,
    invalid_message_type, completed))]
#[allow(clippy::too_many_arguments)]
pub fn capture_library(
    py: Python<'_>,
    message: Py<PyType>,
    kinds: Vec<(Py<PyType>, i64)>,
    text_part: Py<PyType>,
    tool_call: Py<PyType>,
    invalid_argument: Py<PyType>,
    invalid_message_type: Py<PyType>,
    completed: Py<PyAny>,
) -> PyResult<()> {
    let bad = || PyValueError::new_err("capture_library: six kinds, each of a known code");
    let kinds = kinds
        .into_iter()
        .map(|(class, code)| Ok((class, Kind::from_code(code).ok_or_else(bad)?)))
        .collect::<PyResult<Vec<_>>>()?;
    // An array: finding a class's kind is the binding's commonest step.
    let kinds: [_; 6] = kinds.try_into().map_err(|_| bad())?;
    let tool_message = kinds.iter().find(|(_, kind)| *kind == Kind::Tool);
    let tool_message = tool_message.ok_or_else(bad)?.0.clone_ref(py);
    let library = Library {
        message,
        kinds,
        text_part,
        tool_call,
        tool_message,
        invalid_argument,
        invalid_message_type,
        completed,
        sequence: py.import("collections.abc")?.getattr("Sequence")?.unbind(),
        index: py.import("operator")?.getattr("index")?.unbind(),
        attrs: Attr::NAMES.map(|name| PyString::intern(py, name).unbind()),
    };
    let _ = LIBRARY.set(py, library);
    Ok(())
}
