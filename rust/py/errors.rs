//! The one place where the core's errors and the binding's own checks become Python
//! exceptions: the classes and messages of the pure-Python reference.

use super::library::Library;
use crate::error::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::fmt;

/// An error on its way to Python. Boxed: every read of the history returns a `Result`, and
/// one a pointer wide (a `PyErr` is several words) is returned in registers.
pub struct Failure(Box<PyErr>);

impl From<PyErr> for Failure {
    #[cold]
    fn from(error: PyErr) -> Self {
        Failure(Box::new(error))
    }
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> Self {
        *failure.0
    }
}

impl From<CoreError> for Failure {
    fn from(error: CoreError) -> Self {
        Python::attach(|py| match &error {
            CoreError::NotAMessage { .. } => invalid_message_type(py, error.to_string()),
            CoreError::NoUserMessage => invalid_argument(py, error.to_string()),
        })
    }
}

fn raise(py: Python<'_>, class: PyResult<&Py<PyType>>, message: String) -> Failure {
    let class = match class {
        Ok(class) => class,
        Err(error) => return error.into(),
    };
    match class.bind(py).call1((message,)) {
        Ok(instance) => PyErr::from_value(instance).into(),
        Err(error) => error.into(),
    }
}

/// `InvalidMessageTypeError(message)`: a value that should be a message (or a str) is not.
pub fn invalid_message_type(py: Python<'_>, message: String) -> Failure {
    raise(
        py,
        Library::get(py).map(|l| &l.invalid_message_type),
        message,
    )
}

/// `InvalidArgumentError(message)`: a value outside its domain.
pub fn invalid_argument(py: Python<'_>, message: String) -> Failure {
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

/// Where a value came from, as error messages name it: `messages[3]`, `system`, ...
#[derive(Clone, Copy)]
pub enum Where<'a> {
    Index(usize),
    System,
    Named(&'a str),
}

impl fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Where::Index(index) => write!(f, "messages[{index}]"),
            Where::System => f.write_str("system"),
            Where::Named(name) => f.write_str(name),
        }
    }
}
