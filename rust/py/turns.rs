//! Turn segmentation (SPEC §4) over a Python history.

use super::history::sequence;
use super::library::Library;
use super::message::core_of;
use crate::error::{CoreError, Where};
use crate::model::MessageCore;
use crate::turns;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple};
use std::sync::Arc;

/// Streams the cores of `messages[..end]` into `sink`, each message read once, in order.
pub fn stream_cores<'py>(
    library: &Library,
    messages: &Bound<'py, PyAny>,
    end: Option<usize>,
    mut sink: impl FnMut(&Arc<MessageCore>),
) -> PyResult<()> {
    let items = sequence(library, messages)?;
    let end = end.map_or(items.len, |end| end.min(items.len));
    for index in 0..end {
        let object = items.get(index)?;
        sink(&core_of(library, &object, Where::Index(index))?);
    }
    Ok(())
}

/// Turn starts, ends and inferred completion.
#[pyfunction]
pub fn segment<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let library = Library::get(py)?;
    let mut segmenter = turns::Segmenter::new();
    stream_cores(library, messages, None, |core| segmenter.push(core))?;
    let turns = segmenter.finish();
    let starts = PyList::new(py, turns.iter().map(|t| t.0))?;
    let ends = PyList::new(py, turns.iter().map(|t| t.1))?;
    let completed = PyList::new(py, turns.iter().map(|t| t.2))?;
    PyTuple::new(py, [starts, ends, completed])
}

/// Number of turns that start in `messages[:end]`.
#[pyfunction]
pub fn count_turns(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    let library = Library::get(py)?;
    let bad = || -> PyErr {
        CoreError::OutOfDomain {
            what: "count_turns end",
            expected: "an int >= 0",
            repr: end.repr().map(|r| r.to_string()).unwrap_or_default(),
        }
        .into()
    };
    if end.is_instance_of::<PyBool>() || !end.is_instance_of::<PyInt>() {
        return Err(bad());
    }
    // The int's value, whatever its class's own comparisons say.
    let plain = library.index.bind(py).call1((end,))?;
    if plain.lt(0)? {
        return Err(bad());
    }
    let end = plain.extract::<usize>().unwrap_or(usize::MAX);
    let mut starts = turns::TurnStarts::new();
    let mut count = 0;
    stream_cores(library, messages, Some(end), |core| {
        count += usize::from(starts.push(core));
    })?;
    Ok(count)
}
