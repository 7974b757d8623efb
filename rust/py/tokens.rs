//! Token counting for Python strs and messages: the heuristic (`rust/tokens.rs`) and the exact
//! counts of the built-in encodings (`rust/bpe.rs`).

use super::errors::type_name;
use super::history::sequence;
use super::library::Library;
use super::message::{core_of, tokens};
use crate::bpe::{Bpe, Encoding};
use crate::error::{CoreError, Where};
use crate::tokens::{count_utf8_bytes_with, Heuristic, CL100K, O200K};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use std::borrow::Cow;

/// Inputs at least this large are counted with the GIL released (below it, detaching costs
/// more than it lets other threads gain).
const DETACH_BYTES: usize = 64 * 1024;

/// The UTF-8 bytes of a str; one with lone surrogates is encoded with `surrogatepass`
/// (WTF-8), which the core counts as the reference does. No method of a str subclass runs.
fn wtf8<'a>(text: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(text) = text.to_str() {
        return Ok(Cow::Borrowed(text.as_bytes()));
    }
    // `str.encode` itself: a str subclass's own `encode` never runs.
    let py = text.py();
    let encoded = py
        .get_type::<PyString>()
        .getattr(intern!(py, "encode"))?
        .call1((text, intern!(py, "utf-8"), intern!(py, "surrogatepass")))?;
    Ok(Cow::Owned(
        encoded.cast_into::<PyBytes>()?.as_bytes().to_vec(),
    ))
}

/// `count` of `bytes`, with the GIL released when they are large.
fn counted(py: Python<'_>, bytes: &[u8], count: impl Fn(&[u8]) -> u64 + Sync) -> u64 {
    if bytes.len() >= DETACH_BYTES {
        py.detach(|| count(bytes))
    } else {
        count(bytes)
    }
}

/// Heuristic cl100k_base tokens of a Python str.
pub fn count_str(text: &Bound<'_, PyString>) -> PyResult<u64> {
    count_str_with(&CL100K, text)
}

/// Heuristic tokens of a Python str.
fn count_str_with(heuristic: &Heuristic, text: &Bound<'_, PyString>) -> PyResult<u64> {
    let bytes = wtf8(text)?;
    Ok(counted(text.py(), &bytes, |bytes| {
        count_utf8_bytes_with(heuristic, bytes)
    }))
}

/// The heuristic of `encoding` (None: cl100k_base).
fn heuristic_of(encoding: Option<&Bound<'_, PyAny>>) -> PyResult<&'static Heuristic> {
    Ok(match encoding.map(encoding_of).transpose()? {
        None | Some(Encoding::Cl100kBase) => &CL100K,
        Some(Encoding::O200kBase) => &O200K,
    })
}

/// `text` as a str, or the error both counters give for anything else.
fn text_to_count<'a, 'py>(text: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyString>> {
    text.cast::<PyString>().map_err(|_| {
        let type_name = type_name(text);
        CoreError::NotText { type_name }.into()
    })
}

/// Estimated tokens of `text` (the heuristic of `rust/tokens.rs` for `encoding`).
#[pyfunction]
#[pyo3(signature = (text, encoding=None))]
pub fn count_text(text: &Bound<'_, PyAny>, encoding: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    let heuristic = heuristic_of(encoding)?;
    count_str_with(heuristic, text_to_count(text)?)
}

/// Heuristic tokens of every message.
#[pyfunction]
pub fn message_tokens<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let library = Library::get(py)?;
    let items = sequence(library, messages)?;
    let mut counts = Vec::with_capacity(items.len);
    for index in 0..items.len {
        let message = items.get(index)?;
        let at = Where::Index(index);
        let core = core_of(library, &message, at)?;
        counts.push(tokens(library, &message, &core, at)?);
    }
    PyList::new(py, counts)
}

/// The built-in encoding `encoding` names; the same errors as
/// `_reference/tokens.py::check_encoding`.
fn encoding_of(encoding: &Bound<'_, PyAny>) -> PyResult<Encoding> {
    let py = encoding.py();
    let Ok(name) = encoding.cast::<PyString>() else {
        let type_name = type_name(encoding);
        return Err(CoreError::EncodingNotAStr { type_name }.into());
    };
    if let Some(found) = name.to_str().ok().and_then(Encoding::from_name) {
        return Ok(found);
    }
    // The repr of an exact str copy (made by the str type from the bytes): no method of a str
    // subclass runs.
    let bytes = PyBytes::new(py, &wtf8(name)?);
    let copy = py
        .get_type::<PyString>()
        .call1((bytes, "utf-8", "surrogatepass"))?;
    let repr = copy.repr()?.to_string_lossy().into_owned();
    Err(CoreError::UnknownEncoding { repr }.into())
}

/// Exact tokens of a Python str; lone surrogates are read as tiktoken reads them.
fn bpe_count_str(bpe: &Bpe, text: &Bound<'_, PyString>) -> PyResult<u64> {
    let bytes = wtf8(text)?;
    Ok(counted(text.py(), &bytes, |bytes| bpe.count_wtf8(bytes)))
}

/// Exact tokens of `text` in `encoding` (`len(encode_ordinary(text))`).
#[pyfunction]
pub fn bpe_count_text(encoding: &Bound<'_, PyAny>, text: &Bound<'_, PyAny>) -> PyResult<u64> {
    let encoding = encoding_of(encoding)?;
    bpe_count_str(Bpe::get(encoding), text_to_count(text)?)
}
