//! The one place where the core's errors and the binding's own checks become Python
//! exceptions: the classes and messages of the pure-Python reference.

use super::library::Library;
use crate::error::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyType;

impl From<CoreError> for PyErr {
    fn from(error: CoreError) -> Self {
        Python::attach(|py| {
            if error.is_invalid_argument() {
                invalid_argument(py, error.to_string())
            } else {
                invalid_message_type(py, error.to_string())
            }
        })
    }
}

fn raise(py: Python<'_>, class: PyResult<&Py<PyType>>, message: String) -> PyErr {
    match class.and_then(|class| class.bind(py).call1((message,))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(error) => error,
    }
}

/// `InvalidMessageTypeError(message)`: a value that should be a message (or a str) is not.
pub fn invalid_message_type(py: Python<'_>, message: String) -> PyErr {
    raise(
        py,
        Library::get(py).map(|l| &l.invalid_message_type),
        message,
    )
}

/// `InvalidArgumentError(message)`: a value outside its domain.
pub fn invalid_argument(py: Python<'_>, message: String) -> PyErr {
    raise(py, Library::get(py).map(|l| &l.invalid_argument), message)
}

/// The name of `value`'s class as error messages give it (`PyType_GetName`, which a
/// metaclass cannot override; the reference reads the same).
pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "object".into())
}
