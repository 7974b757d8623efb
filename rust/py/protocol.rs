//! Tool-call protocol validation (SPEC §6) over a Python history.

use super::library::Library;
use super::turns::stream_cores;
use crate::protocol::{self, Violation};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// Every violation as `(kind, message_id, tool_call_id)`, in message order.
#[pyfunction]
pub fn validate<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let library = Library::get(py)?;
    let mut validator = protocol::Validator::new();
    stream_cores(library, messages, None, |core| validator.push(core))?;
    violations(py, &validator.finish())
}

/// Violations as the reference gives them: a list of `(kind, message_id, tool_call_id)`.
pub fn violations<'py>(py: Python<'py>, found: &[Violation]) -> PyResult<Bound<'py, PyList>> {
    let tuples = found.iter().map(|v| {
        PyTuple::new(
            py,
            [
                v.kind.name(),
                v.message_id.as_str(),
                v.tool_call_id.as_str(),
            ],
        )
    });
    PyList::new(py, tuples.collect::<PyResult<Vec<_>>>()?)
}
