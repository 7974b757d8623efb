//! Where the core's errors become the exceptions the pure-Python reference raises: the core
//! writes each message (`crate::error`), the binding picks its Python class.

use super::library::Library;
use crate::error::CoreError;
use pyo3::prelude::*;

impl From<CoreError> for PyErr {
    fn from(error: CoreError) -> Self {
        Python::attach(|py| {
            let library = match Library::get(py) {
                Ok(library) => library,
                Err(no_library) => return no_library,
            };
            let class = if error.is_invalid_argument() {
                &library.invalid_argument
            } else {
                &library.invalid_message_type
            };
            match class.bind(py).call1((error.to_string(),)) {
                Ok(instance) => PyErr::from_value(instance),
                Err(raised) => raised,
            }
        })
    }
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
