//! `decode_message`: the fast path of `JsonAgentStoreSerializer.loads` for message records
//! (`stores/serializer.py::_fast_message` with the JSON parse), over `crate::decode`.
//!
//! A record the core vouches for is built here as `_fast_message` builds it: `object.__new__`
//! of the library class, then every dataclass field set through `object.__setattr__` (the
//! frozen dataclass's own `__init__` does the same after checks the core already made). For
//! any other record it returns None and the caller decodes it on the checked path, which
//! writes the error: both backends give the same typed error because only one code writes it.

use crate::decode::{self, Body, Call, Content, MediaKind, Part, Record, Rules, Value};
use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple, PyType};
use std::borrow::Cow;

/// The classes built, each with the names of its dataclass fields in the order the values
/// are given below (checked on import against `dataclasses.fields`).
const CLASSES: [(&str, &[&str]); 12] = [
    ("SystemMessage", &["text", "role", "name"]),
    ("UserMessage", &["content", "name"]),
    (
        "AiMessage",
        &[
            "text",
            "tool_calls",
            "refusal",
            "name",
            "usage",
            "provider_items",
        ],
    ),
    (
        "ToolMessage",
        &["tool_call_id", "text", "tool_name", "is_error"],
    ),
    ("AgentActionMessage", &["payload"]),
    ("AgentFormMessage", &["payload", "status"]),
    ("ToolCall", &["id", "name", "arguments"]),
    (
        "Usage",
        &["prompt_tokens", "completion_tokens", "total_tokens"],
    ),
    ("TextPart", &["text"]),
    (
        "ImagePart",
        &["uri", "mime_type", "name", "size_bytes", "data", "detail"],
    ),
    (
        "AudioPart",
        &["uri", "mime_type", "name", "size_bytes", "data"],
    ),
    (
        "FilePart",
        &["uri", "mime_type", "name", "size_bytes", "data"],
    ),
];
/// The fields every message class starts with.
const COMMON: [&str; 5] = ["message_id", "metadata", "version", "turn_id", "_core"];
const SYSTEM: usize = 0;
const USER: usize = 1;
const AI: usize = 2;
const TOOL: usize = 3;
const ACTION: usize = 4;
const FORM: usize = 5;
const TOOL_CALL: usize = 6;
const USAGE: usize = 7;
const TEXT_PART: usize = 8;
const IMAGE_PART: usize = 9;
const AUDIO_PART: usize = 10;
const FILE_PART: usize = 11;

struct Class {
    class: Py<PyType>,
    fields: Vec<Py<PyString>>,
}

struct Decoder {
    classes: Vec<Class>,
    object_new: Py<PyAny>,
    object_setattr: Py<PyAny>,
    int: Py<PyAny>,
    rules: Rules,
}

static DECODER: PyOnceLock<Decoder> = PyOnceLock::new();

fn strings(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    value.try_iter()?.map(|item| item?.extract()).collect()
}

/// Captures the classes and rules on import; a class whose fields differ from `CLASSES`
/// fails the import rather than building wrong objects later.
pub fn capture(py: Python<'_>) -> PyResult<()> {
    let messages = py.import("agentctx_fast.messages")?;
    let fields_of = py.import("dataclasses")?.getattr("fields")?;
    let mut classes = Vec::with_capacity(CLASSES.len());
    for (index, (name, own)) in CLASSES.iter().enumerate() {
        let class = messages.getattr(*name)?.cast_into::<PyType>()?;
        let expected: Vec<&str> = if index <= FORM {
            COMMON.iter().chain(own.iter()).copied().collect()
        } else {
            own.to_vec()
        };
        let found: Vec<String> = fields_of
            .call1((&class,))?
            .try_iter()?
            .map(|field| field?.getattr("name")?.extract())
            .collect::<PyResult<_>>()?;
        if found != expected {
            return Err(PyImportError::new_err(format!(
                "agentctx_fast: {name} has fields {found:?}, the decoder builds {expected:?}"
            )));
        }
        classes.push(Class {
            class: class.unbind(),
            fields: expected
                .iter()
                .map(|field| PyString::intern(py, field).unbind())
                .collect(),
        });
    }
    let object = py.import("builtins")?.getattr("object")?;
    let decoder = Decoder {
        classes,
        object_new: object.getattr("__new__")?.unbind(),
        object_setattr: object.getattr("__setattr__")?.unbind(),
        int: py.import("builtins")?.getattr("int")?.unbind(),
        rules: Rules {
            max_inline_bytes: messages.getattr("MAX_INLINE_BYTES")?.extract()?,
            system_roles: strings(&messages.getattr("SYSTEM_ROLES")?)?,
            image_details: strings(&messages.getattr("IMAGE_DETAILS")?)?,
        },
    };
    let _ = DECODER.set(py, decoder);
    Ok(())
}

/// The message a record holds when it is well formed, else None (decode it on the checked
/// path: `JsonAgentStoreSerializer.loads` does).
#[pyfunction]
#[pyo3(signature = (data, /))]
pub fn decode_message<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let decoder = DECODER
        .get(py)
        .ok_or_else(|| PyImportError::new_err("agentctx_fast._native did not finish its import"))?;
    let Some(record) =
        decode::parse(data.as_bytes()).and_then(|value| decode::message(value, &decoder.rules))
    else {
        return Ok(None);
    };
    Builder { py, decoder }.message(record)
}

struct Builder<'py, 'd> {
    py: Python<'py>,
    decoder: &'d Decoder,
}

/// `Ok(None)`: the record holds something only the checked path can judge (an int Python
/// refuses to read, say).
type Built<'py> = PyResult<Option<Bound<'py, PyAny>>>;

impl<'py> Builder<'py, '_> {
    fn build(&self, index: usize, values: &[Bound<'py, PyAny>]) -> PyResult<Bound<'py, PyAny>> {
        let class = &self.decoder.classes[index];
        let object = self
            .decoder
            .object_new
            .bind(self.py)
            .call1((&class.class,))?;
        let setattr = self.decoder.object_setattr.bind(self.py);
        for (name, value) in class.fields.iter().zip(values) {
            setattr.call1((&object, name, value))?;
        }
        Ok(object)
    }

    fn str(&self, text: &str) -> Bound<'py, PyAny> {
        PyString::new(self.py, text).into_any()
    }

    fn optional_str(&self, text: &Option<Cow<'_, str>>) -> Bound<'py, PyAny> {
        match text {
            Some(text) => self.str(text),
            None => self.py.None().into_bound(self.py),
        }
    }

    fn none(&self) -> Bound<'py, PyAny> {
        self.py.None().into_bound(self.py)
    }

    /// A JSON value as `json.loads` makes it.
    fn value(&self, value: &Value<'_>) -> Built<'py> {
        let py = self.py;
        Ok(Some(match value {
            Value::Null => self.none(),
            Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
            Value::Int(number) => number.into_pyobject(py)?.into_any(),
            Value::BigInt(literal) => match self.decoder.int.bind(py).call1((*literal,)) {
                Ok(number) => number,
                Err(_) => return Ok(None), // over Python's digit limit: the checked path says so
            },
            Value::Float(number) => PyFloat::new(py, *number).into_any(),
            Value::Str(text) => self.str(text),
            Value::Array(items) => {
                let list = PyList::empty(py);
                for item in items {
                    let Some(item) = self.value(item)? else {
                        return Ok(None);
                    };
                    list.append(item)?;
                }
                list.into_any()
            }
            Value::Object(members) => {
                let dict = PyDict::new(py);
                for (key, item) in members {
                    let Some(item) = self.value(item)? else {
                        return Ok(None);
                    };
                    dict.set_item(self.str(key), item)?;
                }
                dict.into_any()
            }
        }))
    }

    fn optional_value(&self, value: &Option<Value<'_>>) -> Built<'py> {
        match value {
            Some(value) => self.value(value),
            None => Ok(Some(self.none())),
        }
    }

    fn message(&self, record: Record<'_>) -> Built<'py> {
        let py = self.py;
        let Some(metadata) = self.value(&record.metadata)? else {
            return Ok(None);
        };
        let mut values = vec![
            self.str(&record.message_id),
            metadata,
            record.version.into_pyobject(py)?.into_any(),
            self.optional_str(&record.turn_id),
            self.none(),
        ];
        let class = match &record.body {
            Body::System { text, role, name } => {
                values.extend([self.str(text), self.str(role), self.optional_str(name)]);
                SYSTEM
            }
            Body::User { content, name } => {
                let content = match content {
                    Content::Text(text) => self.str(text),
                    Content::Parts(parts) => {
                        let mut built = Vec::with_capacity(parts.len());
                        for part in parts {
                            let Some(part) = self.part(part)? else {
                                return Ok(None);
                            };
                            built.push(part);
                        }
                        PyTuple::new(py, built)?.into_any()
                    }
                };
                values.extend([content, self.optional_str(name)]);
                USER
            }
            Body::Ai {
                text,
                tool_calls,
                refusal,
                name,
                usage,
            } => {
                let calls = tool_calls
                    .iter()
                    .map(
                        |Call {
                             id,
                             name,
                             arguments,
                         }| {
                            self.build(
                                TOOL_CALL,
                                &[self.str(id), self.str(name), self.str(arguments)],
                            )
                        },
                    )
                    .collect::<PyResult<Vec<_>>>()?;
                let usage = match usage {
                    None => self.none(),
                    Some(counts) => {
                        let mut built = Vec::with_capacity(3);
                        for count in counts {
                            let Some(count) = self.value(count)? else {
                                return Ok(None);
                            };
                            built.push(count);
                        }
                        self.build(USAGE, &built)?
                    }
                };
                values.extend([
                    self.optional_str(text),
                    PyTuple::new(py, calls)?.into_any(),
                    self.optional_str(refusal),
                    self.optional_str(name),
                    usage,
                    // A record with provider items is left to the checked path (its key is
                    // unknown to `crate::decode`), so every record built here has none.
                    PyTuple::empty(py).into_any(),
                ]);
                AI
            }
            Body::Tool {
                tool_call_id,
                text,
                tool_name,
                is_error,
            } => {
                values.extend([
                    self.str(tool_call_id),
                    self.str(text),
                    self.optional_str(tool_name),
                    PyBool::new(py, *is_error).to_owned().into_any(),
                ]);
                TOOL
            }
            Body::Action { payload } => {
                let Some(payload) = self.optional_value(payload)? else {
                    return Ok(None);
                };
                values.push(payload);
                ACTION
            }
            Body::Form { payload, status } => {
                let Some(payload) = self.optional_value(payload)? else {
                    return Ok(None);
                };
                values.extend([payload, self.optional_str(status)]);
                FORM
            }
        };
        Ok(Some(self.build(class, &values)?))
    }

    fn part(&self, part: &Part<'_>) -> Built<'py> {
        let (kind, uri, mime_type, name, size_bytes, data, detail) = match part {
            Part::Text(text) => return Ok(Some(self.build(TEXT_PART, &[self.str(text)])?)),
            Part::Media {
                kind,
                uri,
                mime_type,
                name,
                size_bytes,
                data,
                detail,
            } => (kind, uri, mime_type, name, size_bytes, data, detail),
        };
        let Some(size_bytes) = self.optional_value(size_bytes)? else {
            return Ok(None);
        };
        let mut values = vec![
            self.optional_str(uri),
            self.optional_str(mime_type),
            self.optional_str(name),
            size_bytes,
            match data {
                Some(data) => PyBytes::new(self.py, data).into_any(),
                None => self.none(),
            },
        ];
        let class = match kind {
            MediaKind::Image => {
                values.push(self.optional_str(detail));
                IMAGE_PART
            }
            MediaKind::Audio => AUDIO_PART,
            MediaKind::File => FILE_PART,
        };
        Ok(Some(self.build(class, &values)?))
    }
}
